"""A runner host's keys (core.keys, docs/hosts.md): its agent, worker and gateway refuse
to start without the instance's shared keys rather than make keys of their own, hold
no SECRET_KEY, and start once they are given the web host's."""

import io
import os
import shutil
import subprocess
import sys

import pytest
from django.conf import settings
from django.core.management import call_command

from core import keys
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
    first = given[0]
    done = runner(data, [*COMMANDS["agent"], "--once"], **{first.env: web[first]})
    assert done.returncode == 0, done.stderr
    assert "reconciled" in done.stdout
    assert not (data / first.file).exists()
    assert not (data / "secret_key").exists()
    assert not (data / keys.SECRETS.file).exists()
    assert settings.BERTH_ROLE == "all"  # this process: the web host's own
