"""Helpers shared by the benchmarks (no side effects on import)."""

import http.client
import json
import os
import resource
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def redis_url(db: int) -> str:
    """Database `db` of the Redis REDIS_URL names (the local one by default): its
    password, when it has none in the URL, comes from REDIS_PASSWORD_FILE through the
    settings, as for Berth itself (docs/security.md 28)."""
    from urllib.parse import urlsplit, urlunsplit

    url = urlsplit(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    return urlunsplit(url._replace(path=f"/{db}"))


def use_instance(data_dir: Path, redis_db: int, **env: str) -> None:
    """The environment of a benchmark's own Berth, before Django is imported: its
    DATA_DIR, its Redis database and `env` (the settings the benchmark changes)."""
    os.environ.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        DATA_DIR=str(data_dir),
        REDIS_URL=redis_url(redis_db),
        PYTHONUNBUFFERED="1",
        **env,
    )


def start_daphne(port: int) -> subprocess.Popen:
    """A daphne on 127.0.0.1:`port` with the caller's environment, once it answers. The
    worker started after it fetches runs' files from it (the internal API)."""
    os.environ["BERTH_WEB_URL"] = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "daphne"),
            "-b",
            "127.0.0.1",
            "-p",
            str(port),
            "config.asgi:application",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("daphne did not start")


def timed(fn: Callable[[], object], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


def p95(values: list[float]) -> float:
    return sorted(values)[max(0, round(0.95 * len(values)) - 1)]


# -- CPU per request: what a throughput figure is made of on a machine of few cores ----

HZ = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU the processes `pids` have used (the gone ones count 0)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / HZ


def children_cpu_seconds() -> float:
    """User + system CPU of this process's waited-for children (a wrk run's own)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def in_namespace(pid: int) -> dict[str, list[int]]:
    """The processes in the network namespace of `pid`, by command name."""
    try:
        ns = os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return {}
    found: dict[str, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.readlink(entry / "ns" / "net") == ns:
                found.setdefault((entry / "comm").read_text().strip(), []).append(int(entry.name))
        except OSError:
            continue
    return found


# -- a Berth of the benchmark's own ----------------------------------------------------


def fresh_instance(data_dir: Path) -> None:
    """An empty DATA_DIR and Redis database, Django set up on it, migrated (the caller's
    environment names DATA_DIR and REDIS_URL before this). The Redis database too: a
    bench stopped half-way leaves its tasks queued, naming rows by their ids, which a
    fresh database gives out again. Benches run one at a time (they measure the
    machine): some share a Redis database number."""
    import shutil

    import django
    import redis

    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(parents=True)
    django.setup()
    from django.conf import settings

    redis.Redis.from_url(settings.REDIS_URL).flushdb()  # with the password the settings add
    migrate()


def migrate() -> None:
    """As `manage.py prepare` does after its image: the schema, and this host's token
    for the internal API (its worker fetches runs' files from daphne)."""
    from django.core.management import call_command

    from sandbox.hosts import keep_own_token

    call_command("migrate", verbosity=0)
    keep_own_token()


def team_with_workspace(
    team: str = "bench",
    workspace: str = "app",
    scopes: Sequence[str] = ("workspace:read", "workspace:write", "run"),
) -> str:
    """A team, its admin (named as the team) with a token of `scopes`, and a workspace of
    the python-http template: the token's secret."""
    from accounts import actions as accounts
    from accounts.access import Actor
    from workspaces import actions

    made, _ = accounts.create_team(team)
    user, _ = accounts.create_user(made, team, "admin", None, "bench-password-1")
    _, token = accounts.create_token(made, user, "bench", list(scopes), None)
    actions.create_workspace(made, Actor(user), workspace.title(), workspace, "python-http")
    return token


class ApiClient:
    """Berth's JSON API on 127.0.0.1:`port` as the holder of `token`, over one kept
    connection: an answer of 300 or more stops the benchmark."""

    def __init__(self, port: int, token: str) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def call(self, method: str, path: str, body: dict | None = None) -> Any:
        self.conn.request(
            method, "/api/v1" + path, json.dumps(body) if body is not None else None, self.headers
        )
        response = self.conn.getresponse()
        answer = json.loads(response.read())
        assert response.status < 300, (method, path, response.status, answer)
        return answer

    def session(self, workspace: str = "app", **body: Any) -> dict:
        """A session of `workspace` opened with `body`, once it is ready."""
        session = self.call("POST", f"/workspaces/{workspace}/sessions", body)
        deadline = time.monotonic() + 180
        while session["state"] != "ready":
            assert session["state"] == "starting" and time.monotonic() < deadline, session
            time.sleep(0.1)
            session = self.call("GET", f"/sessions/{session['id']}")
        return session


def engine_pids() -> dict[str, int]:
    """dockerd and containerd, found by name in /proc (they are not ours to start)."""
    found: dict[str, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                name = (entry / "comm").read_text().strip()
            except OSError:
                continue
            if name in ("dockerd", "containerd") and name not in found:
                found[name] = int(entry.name)
    return found


def worker_queues() -> str:
    """The queues of a one-machine stack's worker, as scripts/supervise names them: the
    web queue and this host's runner queue (runs.tasks.runner_queue)."""
    return f"celery,runner.{os.environ.get('BERTH_SANDBOX_HOST', 'local')}"


def start_logged(cmd: list[str], log: Path) -> subprocess.Popen:
    out = open(log, "w")  # noqa: SIM115 (lives as long as the process)
    return subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)


def start_stack(port: int, data_dir: Path) -> list[subprocess.Popen]:
    """daphne, a Celery worker and the runner agent, once the agent has started."""
    bin_dir = Path(sys.executable).parent
    worker = [str(bin_dir / "celery"), "-A", "config", "worker", "-Q", worker_queues()]
    worker += ["--pool", "threads", "--concurrency", "4"]
    worker += ["--without-heartbeat", "--without-mingle", "--without-gossip"]
    procs = [
        start_daphne(port),
        start_logged(worker, data_dir / "worker.log"),
        start_logged([sys.executable, "manage.py", "runner_agent"], data_dir / "agent.log"),
    ]
    deadline = time.monotonic() + 60
    while "runner agent started" not in (data_dir / "agent.log").read_text():
        if time.monotonic() > deadline:
            stop_all(procs)
            raise SystemExit("the runner agent did not start")
        time.sleep(0.1)
    return procs


def stop_all(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.wait(20)
