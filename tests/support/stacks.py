"""A whole Berth of a test's own, started the way `make run` starts it (scripts/supervise:
supervisord with daphne, the preview gateway, a Celery worker, beat and the runner
agent), for fault tests that kill its processes or stop its Redis.

It shares nothing a dev server or the rest of the suite uses: its own redis-server on a
free loopback port (so a test may stop it), its own DATA_DIR (so its own SQLite
database, secret key and BERTH_INSTANCE, hence its own containers and volumes), its own
ports. Production settings (config.settings), as `make run` has them, except shorter
reconcile intervals so recoveries take seconds.
"""

import json
import os
import re
import secrets
import shutil
import signal
import sqlite3
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import redis
import requests

from tests.support import marks
from tests.support.servers import ROOT, free_port, wait_for

TERMINAL = {"succeeded", "failed", "timed_out", "cancelled", "oom_killed", "error", "lost"}
PROGRAMS = ("web", "gateway", "worker", "beat", "agent")

SETUP = """
from django.core.management import call_command
call_command("migrate", interactive=False, verbosity=0)
from accounts import actions
from accounts.models import ApiToken, Role
team, _ = actions.create_team("team-a", "Team A")
user, _ = actions.create_user(team, "alice", Role.ADMIN, None, password="alice-password-1")
_, secret = actions.create_token(team, user, "fault tests", list(ApiToken.SCOPES), None)
print("TOKEN", secret)
"""
# This checkout's `manage.py prepare` makes the token its own worker and agent present
# to the internal API (an older checkout's has none to make).
OWN_TOKEN = """
from sandbox.hosts import keep_own_token
keep_own_token()
"""


class RedisServer:
    """A redis-server of the test's own, which it may stop and start again (same port,
    no persistence: a restart comes back empty, as a crashed broker without its data).
    It asks for a password, as `scripts/host-setup redis` has it: kept in a 0600 file
    the stack is pointed at (REDIS_PASSWORD_FILE), handed to the server in a 0600
    config file, never on its command line."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.workdir = workdir
        self.password = secrets.token_urlsafe(32)
        self.password_file = workdir / "redis.password"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url_with_password(self) -> str:
        return f"redis://:{self.password}@127.0.0.1:{self.port}/0"

    def client(self, **kwargs: Any) -> redis.Redis:
        return redis.Redis(port=self.port, password=self.password, **kwargs)

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        conf = self.workdir / "redis.conf"
        for path, text in (
            (self.password_file, self.password),
            (conf, f"requirepass {self.password}\n"),
        ):
            path.touch(mode=0o600)
            path.write_text(text)
        with open(self.workdir / "redis.log", "ab") as log:
            self.proc = subprocess.Popen(
                [
                    "redis-server",
                    str(conf),
                    "--port",
                    str(self.port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    str(self.workdir),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        client = self.client(socket_connect_timeout=1)

        def answers() -> bool:
            with suppress(redis.RedisError):
                return bool(client.ping())
            return False

        wait_for(answers, timeout=30, what="the test's redis-server")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(15)
        self.proc = None


class Stack:
    """The running supervised stack and an API client (alice's token: admin of team A)."""

    def __init__(self, root: Path, redis_server: RedisServer, code: Path = ROOT) -> None:
        self.root = root
        self.code = code  # the checkout it runs: this one, or an older one (upgrades)
        self.data_dir = root / "data"
        self.redis = redis_server
        self.port, self.preview_port = free_port(), free_port()
        self.url = f"http://localhost:{self.port}"
        self.instance = "f" + uuid.uuid4().hex[:7]
        self.log_path = root / "supervise.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.token = ""
        self.session = requests.Session()

    @property
    def env(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in marks.server_env(dict(os.environ)).items()
            if not k.startswith("TEST_") and k not in ("DATABASE_URL",)
        }
        if self.code != ROOT:
            # An older checkout runs the image its own `make run` would: the default
            # alias (its starters may name it), not this checkout's recipe tag
            # (config.settings_test).
            env.pop("SANDBOX_IMAGE", None)
        return {
            **env,
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "DATA_DIR": str(self.data_dir),
            "BERTH_INSTANCE": self.instance,
            # An older checkout (an upgrade's) reads no password file: it gets the
            # password in REDIS_URL, as an operator's Redis gives it.
            "REDIS_URL": self.redis.url if self.code == ROOT else self.redis.url_with_password,
            "REDIS_PASSWORD_FILE": str(self.redis.password_file),
            "BERTH_HOST": "127.0.0.1",
            "BERTH_PORT": str(self.port),
            "PREVIEW_PORT": str(self.preview_port),
            "RUN_RECONCILE_EVERY_S": "3",
            "RUN_STALE_QUEUED_S": "8",
            "PREVIEW_START_DEADLINE_S": "20",
            "PYTHONUNBUFFERED": "1",
        }

    # -- lifecycle -------------------------------------------------------------------

    def prepare(self) -> None:
        """What `manage.py prepare` does for `make run` (the image is the suite's), and a
        team, a member and her token."""
        # 0700, as manage.py makes it (and `manage.py prepare` makes an older one).
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        out = self.shell(SETUP + (OWN_TOKEN if self.code == ROOT else ""))
        self.token = re.search(r"^TOKEN (\S+)$", out, re.M).group(1)  # type: ignore[union-attr]
        self.session.headers["Authorization"] = f"Bearer {self.token}"

    def shell(self, code: str) -> str:
        """`code` run by `manage.py shell` of the stack's checkout, on its data."""
        return subprocess.run(
            [str(self.code / ".venv/bin/python"), "manage.py", "shell", "-c", code],
            cwd=self.code,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout

    def start(self) -> None:
        marks.require("a supervised stack", "docker")
        with open(self.log_path, "ab") as log:
            # A session of its own, as a terminal's `make run` is its own process group.
            self.proc = subprocess.Popen(
                [str(self.code / "scripts/supervise")],
                cwd=self.code,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_for(
            lambda: all(self.pid(p) for p in PROGRAMS),
            timeout=60,
            what="supervisord to spawn every program",
        )
        self.wait_serving(timeout=90)
        wait_for(lambda: "runner agent started" in self.log(), timeout=90, what="the runner agent")
        wait_for(
            lambda: re.search(r"worker \|.*ready\.", self.log()),
            timeout=90,
            what="the celery worker",
        )

    def interrupt(self, timeout: float = 60) -> int:
        """Ctrl-C, as a person stops `make run`: returns supervisord's exit status."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout)
        finally:
            self.proc = None

    def kill_all(self) -> None:
        """After a failed test: nothing of the stack outlives it."""
        pids = [p for p in (self.pid(n) for n in PROGRAMS) if p]
        if self.proc is not None:
            with suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.proc = None
        for pid in pids:
            with suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)

    def remove_sandboxes(self) -> None:
        """Containers and volumes of this instance, should a test end mid-run."""
        label = f"label=berth.instance={self.instance}"
        for kind, listing in (
            ("container", ["docker", "ps", "-aq", "--filter", label]),
            ("volume", ["docker", "volume", "ls", "-q", "--filter", label]),
        ):
            ids = subprocess.run(listing, capture_output=True, text=True).stdout.split()
            if ids:
                subprocess.run(["docker", kind, "rm", "-f", *ids], capture_output=True)

    # -- looking at it ---------------------------------------------------------------

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def pid(self, program: str) -> int:
        """The pid supervisord last spawned for `program` (0 if none yet)."""
        found = re.findall(rf"spawned: '{program}' with pid (\d+)", self.log())
        return int(found[-1]) if found else 0

    def alive(self, pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        # A zombie is not alive: supervisord reaps its children, so it is brief.
        with suppress(FileNotFoundError):
            return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
        return False

    def state_now(self, run: dict[str, Any]) -> str:
        """The run's state as its row says this instant, read from the stack's database:
        for timing a kill to a state too brief to catch through the API."""
        db = sqlite3.connect(f"file:{self.data_dir / 'berth.sqlite3'}?mode=ro", uri=True, timeout=5)
        try:
            row = db.execute(
                "SELECT state FROM runner_run WHERE public_id = ?", (run["id"],)
            ).fetchone()
        finally:
            db.close()
        return row[0] if row else ""

    def serving(self) -> bool:
        """Berth answers, through daphne and through the preview gateway: a preview host
        the gateway knows nothing of is handed to daphne, which says so (404)."""
        try:
            direct = requests.get(f"{self.url}/healthz", timeout=2)
            gateway = requests.get(
                f"http://127.0.0.1:{self.preview_port}/",
                timeout=2,
                headers={"Host": f"aaaaaaaaaaaa.preview.localhost:{self.preview_port}"},
            )
        except requests.RequestException:
            return False
        return direct.status_code == 200 and gateway.status_code == 404

    def wait_serving(self, timeout: float) -> None:
        wait_for(self.serving, timeout=timeout, interval=0.2, what="Berth to answer")

    # -- the API ---------------------------------------------------------------------

    def api(
        self, method: str, path: str, body: dict[str, Any] | None = None, timeout: float = 30
    ) -> requests.Response:
        return self.session.request(
            method,
            f"{self.url}/api/v1{path}",
            timeout=timeout,
            data=json.dumps(body) if body is not None else None,
            headers={"Content-Type": "application/json"},
        )

    def run(self, workspace: str, command: str) -> dict[str, Any]:
        r = self.api("POST", f"/workspaces/{workspace}/runs", {"command": command})
        assert r.status_code == 202, r.text
        return r.json()

    def get_run(self, run: dict[str, Any]) -> dict[str, Any]:
        return self.api("GET", f"/runs/{run['id']}").json()

    def wait_run(
        self, run: dict[str, Any], timeout: float = 120, states: set[str] = TERMINAL
    ) -> dict[str, Any]:
        def reached() -> dict[str, Any] | None:
            current = self.get_run(run)
            return current if current["state"] in states else None

        return wait_for(
            reached,
            timeout=timeout,
            interval=0.2,
            what=f"run {run['id']} to reach {sorted(states)}",
        )

    def output_so_far(self, run: dict[str, Any]) -> list[str]:
        page = self.api("GET", f"/runs/{run['id']}/logs?after=0&limit=5000").json()
        return [e["text"] for e in page["entries"] if e["stream"] != "system"]

    def output(self, run: dict[str, Any], timeout: float = 300) -> list[str]:
        entries: list[dict[str, Any]] = []
        after = 0

        def read() -> bool:
            """Every page there is now; True once the log is complete."""
            nonlocal after
            while True:
                page = self.api("GET", f"/runs/{run['id']}/logs?after={after}&limit=5000").json()
                entries.extend(page["entries"])
                after = page["next"]
                if page["complete"] or not page["entries"]:
                    return page["complete"]

        wait_for(read, timeout, what=f"run {run['id']}'s complete log")
        return [e["text"] for e in entries if e["stream"] != "system"]


@contextmanager
def supervised_stack(root: Path, code: Path = ROOT) -> Iterator[Stack]:
    """A fresh stack under `root` (emptied first) running the checkout `code`, stopped
    and removed at the end."""
    shutil.rmtree(root, ignore_errors=True)
    redis_server = RedisServer(root / "redis")
    redis_server.start()
    stack = Stack(root, redis_server, code)
    try:
        stack.prepare()
        stack.start()
        yield stack
    finally:
        if stack.proc is not None:
            with suppress(subprocess.TimeoutExpired):
                stack.interrupt()
        stack.kill_all()
        stack.remove_sandboxes()
        redis_server.stop()


@contextmanager
def stack_with_shop(name: str) -> Iterator[Stack]:
    """A stack of the test's own (under the test DATA_DIR's stacks/<name>) whose member
    has made the workspace `shop` from the python-http template."""
    from django.conf import settings

    with supervised_stack(settings.DATA_DIR / "stacks" / name) as stack:
        r = stack.api(
            "POST", "/workspaces", {"name": "Shop", "slug": "shop", "template": "python-http"}
        )
        assert r.status_code == 201, r.text
        yield stack
