"""Real Berth processes for tests: daphne and a Celery worker, on the test database."""

import asyncio
import inspect
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from django.conf import settings
from django.db import connection

from tests.support import marks

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def wait_for(
    condition: Callable[[], Any],
    timeout: float = 30,
    interval: float = 0.05,
    what: str = "condition",
    until: Callable[[Any], object] | None = None,
) -> Any:
    """Call `condition` every `interval` s until what it returns is truthy (given `until`:
    until `until(value)` is) and return that value; past `timeout` s, fail naming `what`
    (and, given `until`, the last value, which says where things stood)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if until(value) if until is not None else value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(_timed_out(timeout, what, value, until))
        time.sleep(interval)


async def wait_for_async(
    condition: Callable[[], Any],
    timeout: float = 30,
    interval: float = 0.05,
    what: str = "condition",
    until: Callable[[Any], object] | None = None,
) -> Any:
    """`wait_for` for code on an event loop: the loop is never blocked between tries, and
    what `condition` returns is awaited when it is awaitable."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if until(value) if until is not None else value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(_timed_out(timeout, what, value, until))
        await asyncio.sleep(interval)


def _timed_out(timeout: float, what: str, value: object, until: object) -> str:
    last = f"; last: {value!r}" if until is not None else ""
    return f"timed out after {timeout} s waiting for {what}{last}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_database_url() -> str:
    """A DATABASE_URL for the database pytest-django created, for subprocesses."""
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    # A socket directory as host is percent-encoded, the way dj-database-url reads it.
    host = quote(db["HOST"], safe="")
    port = f":{db['PORT']}" if db["PORT"] else ""
    return f"postgres://{db['USER']}:{db['PASSWORD'] or ''}@{host}{port}/{db['NAME']}"


def subprocess_env() -> dict[str, str]:
    return {
        **marks.server_env(dict(os.environ)),
        "DJANGO_SETTINGS_MODULE": "config.settings_test",
        "DATABASE_URL": test_database_url(),
        "TEST_DATA_DIR": str(settings.DATA_DIR),
        "TEST_REDIS_URL": settings.REDIS_URL,
        "PYTHONUNBUFFERED": "1",
        # Servers keep their database connections, as in production (the test process
        # itself does not: config.settings_test).
        "DB_CONN_MAX_AGE": os.environ.get("DB_CONN_MAX_AGE", "60"),
        "GIT_MAX_PUSH_MB": "5",  # small enough for a test to push past it
        "RUN_ARTIFACTS_MAX_MB": "5",  # likewise for a run's artifacts
        # A name no engine has, allowed so a test can reach `image_missing`.
        "ALLOWED_IMAGES": f"{settings.SANDBOX_IMAGE},berth-test-missing:none",
        # Crash tests should not wait the production intervals.
        "RUN_RECONCILE_EVERY_S": "3",
        # A host's row holds its engine's facts within a second or two of a test's flush.
        "HOST_HEARTBEAT_S": "1",
        # A preview that never listens fails in seconds, not a minute.
        "PREVIEW_START_DEADLINE_S": "6",
        # A request to a starting preview is held at most this long (then: "starting").
        "PREVIEW_HOLD_S": "4",
        # Above the 5 MB a test round-trips, below what another one sends.
        "PREVIEW_MAX_BODY_MB": "8",
        "RUN_STALE_QUEUED_S": "8",
        # Egress tests reach host-local servers under reserved .test names (no proxy
        # bypass list matches them); meta.test stands for the cloud metadata address.
        "EGRESS_HOSTS": "files.test=127.0.0.1,index.test=127.0.0.1,meta.test=169.254.169.254",
        "EGRESS_ALLOWED_ADDRESSES": "127.0.0.1",
        "EGRESS_MAX_MB": "8",  # above what the installs fetch, below what a test sends
        "EGRESS_MAX_CONNECTIONS": "6",
        "EGRESS_MAX_CONNECTIONS_PER_SANDBOX": "24",  # a flood test reaches both caps
        "EGRESS_MAX_CONNECTIONS_PER_TEAM": "40",
        # Reads' scratch stores on the host: above two reads of a 4 MB file, below
        # three files of 9 MB (tests/sessions/test_session_reads.py).
        "SESSION_READS_MAX_MB": "24",
    }


@dataclass
class Server:
    url: str
    port: int
    log_path: Path
    pid: int = 0
    gateway_port: int = 0  # the preview gateway: the door preview URLs name
    gateway_pid: int = 0

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def hiding(folder: Path) -> list[str]:
    """A command prefix that runs a process in a mount namespace of its own where
    `folder` is an empty tmpfs (host B's processes: the web host's DATA_DIR is not
    theirs to read or write, as on a machine of their own)."""
    script = 'mount -t tmpfs -o size=1m,mode=0700 berth-hidden "$1" && shift && exec "$@"'
    unshare = ["unshare", "--mount", "--propagation", "private", "--"]
    return [*unshare, "sh", "-c", script, "sh", str(folder)]


@contextmanager
def running(
    cmd: list[str],
    log_path: Path,
    ready,
    what: str,
    env: dict[str, str] | None = None,
    prefix: list[str] | None = None,
) -> Iterator[subprocess.Popen]:
    marks.require(what, "docker", "servers")
    cmd = [*(prefix or []), *cmd]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env={**subprocess_env(), **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
            # As scripts/supervise runs them: what they create is 0600 (docs/security.md 28).
            umask=0o077,
        )
    try:

        def up():
            if proc.poll() is not None:
                raise AssertionError(f"{what} exited early:\n{log_path.read_text()[-3000:]}")
            return ready()

        wait_for(up, timeout=60, what=what)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def daphne(
    env: dict[str, str] | None = None, gateway_port: int = 0, name: str = "daphne", port: int = 0
) -> Iterator[Server]:
    """Daphne and a preview gateway in front of it (on PREVIEW_PORT, or `gateway_port`
    for a second pair started with settings of its own, `env`); on `port`, given one (a
    daphne started again where a page will reconnect)."""
    port = port or free_port()
    server = Server(f"http://localhost:{port}", port, settings.DATA_DIR / f"{name}.log")

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"{server.url}/healthz", timeout=1) as r:
                return r.status == 200
        except OSError:
            return False

    cmd = [str(BIN / "daphne"), "-b", "127.0.0.1", "-p", str(port), "config.asgi:application"]
    with (
        running(cmd, server.log_path, ready, name, env) as proc,
        preview_gateway(port, env, gateway_port, name) as gateway,
    ):
        server.pid = proc.pid
        server.gateway_port = gateway_port or int(settings.PREVIEW_PORT)
        server.gateway_pid = gateway.pid
        yield server


@contextmanager
def preview_gateway(
    app_port: int,
    env: dict[str, str] | None = None,
    port: int = 0,
    name: str = "daphne",
    prefix: list[str] | None = None,
) -> Iterator[subprocess.Popen]:
    """The preview gateway on PREVIEW_PORT (or `port`), handing what it does not serve
    to daphne."""
    port = port or int(settings.PREVIEW_PORT)

    def ready() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False

    cmd = [
        sys.executable,
        "manage.py",
        "preview_gateway",
        "--port",
        str(port),
        "--app",
        f"127.0.0.1:{app_port}",
    ]
    log_path = settings.DATA_DIR / (
        "preview-gateway.log" if name == "daphne" else f"{name}-preview-gateway.log"
    )
    with running(cmd, log_path, ready, f"{name}'s preview gateway", env, prefix) as p:
        yield p


@contextmanager
def celery_worker(
    env: dict[str, str] | None = None,
    host: str = "",
    log: str = "celery-worker.log",
    prefix: list[str] | None = None,
) -> Iterator[subprocess.Popen]:
    """A Celery worker taking the web queue and `host`'s runner queue (this host's by
    default); with `host`, only that host's queue, as a runner host's worker."""
    from config.celery import app

    name = f"test-{os.getpid()}-{host or 'web'}@localhost"
    queues = f"{settings.RUNNER_QUEUE_PREFIX}.{host or settings.SANDBOX_HOST}"
    if not host:
        queues = f"{settings.CELERY_TASK_DEFAULT_QUEUE},{queues}"

    def ready() -> bool:
        return bool(app.control.ping(destination=[name], timeout=0.5))

    cmd = [
        str(BIN / "celery"),
        "-A",
        "config",
        "worker",
        "-n",
        name,
        "-Q",
        queues,
        "--concurrency",
        "2",
        "--pool",
        "threads",
        "--loglevel",
        "INFO",
        "--without-heartbeat",
        "--without-mingle",
        "--without-gossip",
    ]
    with running(cmd, settings.DATA_DIR / log, ready, "celery worker", env, prefix) as p:
        yield p


@contextmanager
def runner_agent(
    env: dict[str, str] | None = None,
    log: str = "runner-agent.log",
    prefix: list[str] | None = None,
) -> Iterator[subprocess.Popen]:
    """The runner agent; with `env`, settings of its own (a test's small budget, or
    another host's engine and name)."""
    log_path = settings.DATA_DIR / log

    def ready() -> bool:
        return "runner agent started" in log_path.read_text(errors="replace")

    cmd = [sys.executable, "manage.py", "runner_agent"]
    with running(cmd, log_path, ready, "runner agent", env, prefix) as p:
        yield p


def restart_engine() -> None:
    """SIGTERM the Docker engine, then start it the way `make test` does: its containers
    stop with it (no live-restore), as after a host's engine restart."""
    marks.require("restarting the engine", "alone")
    pid = int(Path("/var/run/docker.pid").read_text())
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: not Path(f"/proc/{pid}").exists(), 60, interval=0.1, what="dockerd to stop")
    subprocess.run(
        [str(ROOT / "scripts" / "host-setup"), "docker"], check=True, capture_output=True
    )
