"""A runner host's keys (core.keys, docs/hosts.md): its agent, worker and gateway refuse
to start without the instance's shared keys rather than make keys of their own, hold
no SECRET_KEY, and start once they are given the web host's."""

import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command

from core import keys
from sandbox.hosts import Host
from tests.support.hosts import local_host
from tests.support.servers import BIN, subprocess_env

# A runner host refuses SQLite (hosts share PostgreSQL): the PostgreSQL pass runs these.
pytestmark = pytest.mark.postgres

COMMANDS = {
    "agent": [sys.executable, "manage.py", "runner_agent"],
    "gateway": [sys.executable, "manage.py", "preview_gateway", "--port", "1"],
    "worker": [str(BIN / "celery"), "-A", "config", "worker", "--pool", "solo", "-Q", "none"],
}


def runner(data_dir, command: list[str], **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        command,
        env={
            **subprocess_env(),
            "BERTH_ROLE": "runner",
            "BERTH_INSTANCE": settings.BERTH_INSTANCE,  # set explicitly past one host
            "TEST_DATA_DIR": str(data_dir),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("process", sorted(COMMANDS))
def test_a_runner_process_without_the_shared_keys_refuses_to_start_and_makes_none(
    tmp_path, process
):
    done = runner(tmp_path, COMMANDS[process])
    said = done.stdout + done.stderr
    assert done.returncode != 0, said
    assert "refuses to start without the instance's shared keys" in said
    for key in keys.SHARED:
        # The workspace secrets' key is the web host's alone: never asked of a runner.
        assert (key.env in said and key.file in said) is not key.web_only, key.name
    assert "BERTH_HOST_SECRETS_KEY" in said and keys.host_secrets_file("local") in said
    assert "manage.py hosts key local" in said
    assert "BERTH_HOST_TOKEN" in said and keys.host_token_file("local") in said
    made = (
        [p.name for p in tmp_path.rglob("*") if p.name.endswith(".key")]
        if tmp_path.exists()
        else []
    )
    assert made == [], "a runner host made a key of its own"


def test_a_runner_host_holds_no_secret_key(tmp_path):
    done = runner(tmp_path, COMMANDS["agent"], SECRET_KEY="x" * 50)
    assert done.returncode != 0
    assert "A runner host must not hold SECRET_KEY" in done.stderr


@pytest.mark.docker
def test_a_runner_given_the_web_hosts_keys_starts(tmp_path, transactional_db, cast):
    """The files copied from the web host (as docs/hosts.md says), and for one of them
    the variable instead, with the host's secrets key as `manage.py hosts key` prints
    it: the agent reconciles, and made no key of its own. Never the workspace secrets'."""
    web = {key: key.value() for key in keys.SHARED}  # the web host's, made if missing
    data = tmp_path / "runner"
    data.mkdir(mode=0o700)
    given = [key for key in keys.SHARED if not key.web_only]
    for key in given[1:]:
        shutil.copy2(key.path(), data / key.file)
        assert os.stat(data / key.file).st_mode & 0o077 == 0
    printed = io.StringIO()
    call_command("hosts", "key", "local", stdout=printed, stderr=io.StringIO())
    host_key = data / keys.host_secrets_file("local")
    host_key.write_text(printed.getvalue().strip())
    host_key.chmod(0o600)
    token = data / keys.host_token_file("local")
    token.write_text(local_host().issue_token())
    token.chmod(0o600)
    first = given[0]
    # No web host answers there: the agent says so and starts.
    done = runner(
        data,
        [*COMMANDS["agent"], "--once"],
        **{first.env: web[first], "BERTH_WEB_URL": "http://127.0.0.1:9"},
    )
    assert done.returncode == 0, done.stderr
    assert "reconciled" in done.stdout and "starting anyway" in done.stderr
    assert not (data / first.file).exists()
    assert not (data / "secret_key").exists()
    assert not (data / keys.SECRETS.file).exists()
    assert settings.BERTH_ROLE == "all"  # this process: the web host's own


def given_keys(tmp_path) -> Path:
    """A runner's keys dir as an operator fills it, but for its token."""
    data = tmp_path / "runner"
    data.mkdir(mode=0o700)
    keys.make_shared()  # as the web host's `prepare` does, whatever ran before this test
    for key in keys.SHARED:
        if not key.web_only:
            shutil.copy2(key.path(), data / key.file)
    (data / keys.host_secrets_file("local")).write_text(keys.host_secrets_key("local"))
    return data


def test_a_runner_agent_whose_token_the_web_host_refuses_does_not_start(
    tmp_path, berth_server, cast
):
    """Its token asked of the web host's internal API at start (daphne here): another
    host's or none at all is said, and the agent stops; its own, it starts."""
    data = given_keys(tmp_path)
    local = local_host()
    other = Host.objects.create(name="other")
    agent = [*COMMANDS["agent"], "--once"]
    for token, said in (
        ("berth_host_nothing", "is no host's token"),
        (other.issue_token(), "this token is host other's, and this machine is local"),
    ):
        done = runner(data, agent, BERTH_HOST_TOKEN=token, BERTH_WEB_URL=berth_server.url)
        assert done.returncode != 0 and said in done.stderr, done.stderr
        assert "manage.py hosts add local" in done.stderr and token not in done.stderr
    done = runner(data, agent, BERTH_HOST_TOKEN=local.issue_token(), BERTH_WEB_URL=berth_server.url)
    assert done.returncode == 0, done.stderr
    assert "knows this host as local" in done.stdout and "reconciled" in done.stdout
