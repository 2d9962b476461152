"""Host B for the tests (docs/hosts.md, "Tests"): a second Docker engine on this
machine, with its own socket, data root, exec root, pid file and managed containerd,
started once for the module that uses it and stopped after, and B's own runner agent,
Celery worker and preview gateway on it.

Both engines share one kernel and one /proc here: what B runs is reachable from A by
pid. So the tests never take "could not connect" for "never entered": they count the
refusals of the host check (sandbox.netns) and assert the host columns.
"""

import json
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import docker
from django.conf import settings
from django.db import connection

from core import dbrole, keys
from tests.support import marks, servers
from tests.support.fixtures import Restartable
from tests.support.servers import free_port, wait_for

NAME = "b"
# B's agent, worker and gateway sign in as a runner host's role (docs/hosts.md).
RUNNER_ROLE = "berth_runner"


@dataclass
class HostB:
    docker_host: str
    client: docker.DockerClient
    gateway_port: int
    agent_log: Path
    gateway_log: Path
    env: dict[str, str]
    state_dir: Path  # its DATA_DIR: an empty folder of its own at its start
    agent: Restartable  # B's runner agent: a test may kill it and start it again
    token: str = ""  # its token for the internal API, as `hosts add` printed it


def _paths() -> tuple[Path, Path]:
    """Its data root and its run dir: per instance, so two checkouts' suites at once
    never share an engine B."""
    return (
        Path(f"/var/lib/berth-test-{settings.BERTH_INSTANCE}-b"),
        Path(f"/run/berth-test-{settings.BERTH_INSTANCE}-b"),
    )


@contextmanager
def dockerd() -> Iterator[str]:
    """The second engine (`--bridge=none --iptables=false --ip-masq=false`, runsc with
    `--oci-seccomp` in its own daemon.json), with the sandbox image loaded from A
    (`docker save | docker load`: the same image id). Yields its DOCKER_HOST."""
    marks.require("a second Docker engine", "docker")
    marks.require("a second host (it shares PostgreSQL)", "postgres")
    root, run = _paths()
    run.mkdir(mode=0o700, parents=True, exist_ok=True)
    sock, pidfile = run / "docker.sock", run / "docker.pid"
    config = run / "daemon.json"
    runsc = shutil.which("runsc") or "/usr/bin/runsc"
    args = ["--network=host", "--oci-seccomp"]
    config.write_text(json.dumps({"runtimes": {"runsc": {"path": runsc, "runtimeArgs": args}}}))
    pidfile.unlink(missing_ok=True)  # a killed one's: no dockerd lives behind it
    log_path = settings.DATA_DIR / "dockerd-b.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    dockerd_bin = shutil.which("dockerd") or "/usr/sbin/dockerd"
    cmd = [dockerd_bin, "--host", f"unix://{sock}", "--data-root", str(root)]
    cmd += ["--exec-root", str(run / "exec"), "--pidfile", str(pidfile)]
    cmd += ["--config-file", str(config), "--bridge=none", "--iptables=false", "--ip-masq=false"]
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    docker_host = f"unix://{sock}"
    try:

        def up() -> docker.DockerClient | None:
            if proc.poll() is not None:
                raise AssertionError(f"dockerd B exited:\n{log_path.read_text()[-3000:]}")
            try:  # the client asks the engine its API version as it is made
                return docker.DockerClient(base_url=docker_host, timeout=60)
            except (docker.errors.DockerException, OSError):
                return None

        client = wait_for(up, 60, interval=0.1, what="dockerd B")
        _load_image(client, docker_host)
        yield docker_host
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        # Its containers went with it (no live-restore); its data goes too: the next
        # run of a new checkout is a new instance and loads the image again.
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(run, ignore_errors=True)


def _load_image(client: docker.DockerClient, docker_host: str) -> None:
    """The sandbox image of engine A, same id, unless B has it already."""
    from sandbox.engine import engine

    wanted = engine().images.get(settings.SANDBOX_IMAGE).id
    try:
        if client.images.get(settings.SANDBOX_IMAGE).id == wanted:
            return
    except docker.errors.ImageNotFound:
        pass
    saving = subprocess.Popen(
        ["docker", "save", settings.SANDBOX_IMAGE],
        stdout=subprocess.PIPE,
        env={**servers.subprocess_env()},
    )
    loaded = subprocess.run(
        ["docker", "-H", docker_host, "load", "-q"],
        stdin=saving.stdout,
        capture_output=True,
        text=True,
    )
    assert saving.stdout is not None
    saving.stdout.close()
    assert saving.wait() == 0 and loaded.returncode == 0, loaded.stderr
    assert client.images.get(settings.SANDBOX_IMAGE).id == wanted


def runner_database_url() -> str:
    """The test database as a runner host's role sees it: made if missing (roles are
    the cluster's, the throwaway one of this run), granted as the web host would."""
    with connection.cursor() as cursor:
        # Two workers may make it at once: the second one's is a no-op.
        cursor.execute(
            "DO $$ BEGIN CREATE ROLE " + RUNNER_ROLE + " LOGIN; "
            "EXCEPTION WHEN duplicate_object THEN NULL; END $$"
        )
    dbrole.grant(RUNNER_ROLE)
    url = servers.test_database_url()
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{RUNNER_ROLE}:@{rest.split('@', 1)[1]}"


def keys_dir() -> Path:
    """B's keys, as an operator gives them (docs/hosts.md, "Keys"): the shared ones
    copied from the web host's, and its secrets key from `manage.py hosts key b`. Never
    the workspace secrets key, nor SECRET_KEY. Outside the web host's DATA_DIR, which
    B's processes do not see."""
    path = _paths()[1] / "keys"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    for key in keys.SHARED:
        if not key.web_only:
            shutil.copy2(key.path(), path / key.file)
    return path


@contextmanager
def host_b(app_port: int, database_url: str, token: str) -> Iterator[HostB]:
    """Engine B with B's runner agent, worker (queue runner-<instance>.b) and gateway
    (handing what it does not serve to daphne on `app_port`), all as a runner host:
    BERTH_ROLE=runner, keys of its own dir (`keys_dir`: no SECRET_KEY, no workspace
    secrets key). Host b's row must exist: its agent claims it."""
    with ExitStack() as stack:
        docker_host = stack.enter_context(dockerd())
        gateway_port = free_port()
        # B's own DATA_DIR, empty; A's is an empty tmpfs in B's mount namespace.
        state_dir = _paths()[1] / "state"
        shutil.rmtree(state_dir, ignore_errors=True)
        state_dir.mkdir(mode=0o700)
        hidden = servers.hiding(settings.DATA_DIR)
        env = {
            "TEST_DATA_DIR": str(state_dir),
            "BERTH_KEYS_DIR": str(keys_dir()),
            "BERTH_HOST_SECRETS_KEY": keys.host_secrets_key(NAME),
            # Its token for the web host's internal API, there on daphne.
            "BERTH_HOST_TOKEN": token,
            "BERTH_WEB_URL": f"http://127.0.0.1:{app_port}",
            "DOCKER_HOST": docker_host,
            "DATABASE_URL": database_url,
            "BERTH_SANDBOX_HOST": NAME,
            "BERTH_ROLE": "runner",
            "BERTH_INSTANCE": settings.BERTH_INSTANCE,  # set explicitly past one host
            "PREVIEW_GATEWAY_ADDRESS": f"127.0.0.1:{gateway_port}",
            # B's worker evicts every cache of B's when asked: A's keep the default.
            "DEPS_CACHE_MAX_MB": "0",
        }
        agent = Restartable(
            lambda: servers.runner_agent(env, log="runner-agent-b.log", prefix=hidden)
        )
        stack.callback(agent.stop)
        stack.enter_context(
            servers.celery_worker(env, host=NAME, log="celery-worker-b.log", prefix=hidden)
        )
        stack.enter_context(
            servers.preview_gateway(app_port, env, gateway_port, NAME, prefix=hidden)
        )
        yield HostB(
            docker_host,
            docker.DockerClient(base_url=docker_host, timeout=60),
            gateway_port,
            settings.DATA_DIR / "runner-agent-b.log",
            settings.DATA_DIR / f"{NAME}-preview-gateway.log",
            env,
            state_dir,
            agent,
        )
