"""Deploy benchmark (issue 9), run by hand: `.venv/bin/python bench/deploys.py`.

For each round: a new commit of a small stdlib app, a deploy request, then a reviewer's
approval (the action the review page calls). Measured: the time from the approval to
the release URL answering with the new version, with its phases (build, image commit,
start, health, switch), and the requests that failed at the release URL while it
switched, under a steady load of 20 req/s that runs from before the approval until the
previous release's process has been stopped (RELEASE_DRAIN_S after the switch, + 2 s).

Uses its own DATA_DIR (var/bench-deploys), Redis db 5, its own daphne, Celery worker and
runner agent. Goal: zero failed requests during a switch.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = ROOT / "var" / "bench-deploys"
sys.path.insert(0, str(ROOT))
from bench.common import redis_url, worker_queues  # noqa: E402

os.environ.update(
    DJANGO_SETTINGS_MODULE="config.settings",
    DATA_DIR=str(DATA_DIR),
    REDIS_URL=redis_url(5),
    PYTHONUNBUFFERED="1",
)

from bench.common import start_daphne  # noqa: E402

BIN = Path(sys.executable).parent
PORT = 18769
HOST = "app--bench.apps.localhost"
TOML = (
    '[setup]\ncommand = "python3 -m venv --without-pip /deps/venv"\n\n'
    '[deploy]\ncommand = "/deps/venv/bin/python app.py"\nport = 8000\nhealth_path = "/"\n'
)
APP = """from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = b"VERSION"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass

ThreadingHTTPServer(("127.0.0.1", 8000), H).serve_forever()
"""


def setup_instance() -> tuple[Any, Any, Any]:
    shutil.rmtree(DATA_DIR, ignore_errors=True)
    DATA_DIR.mkdir(parents=True)
    import django

    django.setup()
    from bench.common import migrate

    migrate()
    from accounts import actions as accounts
    from accounts.access import Actor
    from workspaces import actions

    team, _ = accounts.create_team("bench")
    asker, _ = accounts.create_user(team, "asker", "member", None, "bench-password-1")
    reviewer, _ = accounts.create_user(team, "reviewer", "reviewer", None, "bench-password-1")
    workspace = actions.create_workspace(team, Actor(asker), "App", "app")
    return workspace, Actor(asker), Actor(reviewer)


def start(cmd: list[str], name: str) -> subprocess.Popen:
    log = open(DATA_DIR / f"{name}.log", "w")  # noqa: SIM115 (lives as long as the process)
    return subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)


def commit(workspace: Any, actor: Any, version: str) -> None:
    from workspaces import actions
    from workspaces.changes import Change

    actions.commit_changes(
        workspace,
        actor,
        [
            Change("write", "app.py", APP.replace("VERSION", version).encode()),
            Change("write", "workspace.toml", TOML.encode()),
        ],
        version,
    )


class Load:
    """GET the release URL 20 times a second; every answer but a 200 is a failure."""

    def __init__(self) -> None:
        self.sent = self.failed = 0
        self.failures: list[str] = []
        self.bodies: set[str] = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        session = requests.Session()
        next_at = time.monotonic()
        while not self.stop.is_set():
            self.sent += 1
            try:
                r = session.get(f"http://127.0.0.1:{PORT}/", headers={"Host": HOST}, timeout=10)
                if r.status_code != 200:
                    self.failed += 1
                    self.failures.append(f"{r.status_code} {r.text[:80]}")
                else:
                    self.bodies.add(r.text)
            except requests.RequestException as e:
                self.failed += 1
                self.failures.append(type(e).__name__)
            next_at += 0.05
            time.sleep(max(0.0, next_at - time.monotonic()))


def deploy(
    workspace: Any, asker: Any, reviewer: Any, version: str, load: Load | None = None
) -> dict[str, float]:
    from deploys import actions
    from deploys.models import DeployRequest, Release

    commit(workspace, asker, version)
    request = actions.request_deploy(workspace, asker, note=version)
    t0 = time.perf_counter()
    actions.approve_deploy(request, reviewer)
    deadline = time.monotonic() + 300
    while True:
        request.refresh_from_db()
        assert request.state not in ("failed", "rejected"), (request.state, request.message)
        try:
            r = requests.get(f"http://127.0.0.1:{PORT}/", headers={"Host": HOST}, timeout=5)
            if r.status_code == 200 and r.text == version:
                break
        except requests.RequestException:
            pass
        assert time.monotonic() < deadline, "the new version never answered"
        time.sleep(0.02)
    total = (time.perf_counter() - t0) * 1000
    request = DeployRequest.objects.select_related("build_run").get(pk=request.pk)
    while request.state != "live":
        time.sleep(0.05)
        request.refresh_from_db()
    release = Release.objects.select_related("process__run").get(request=request)
    build, process = request.build_run, release.process
    assert build and process and process.run

    def ms(a: datetime | None, b: datetime | None) -> float:
        return (b - a).total_seconds() * 1000 if a and b else float("nan")

    from logs import logstore

    commit_s = next(
        (
            float(e["text"].rsplit(" in ", 1)[1].split(" ")[0])
            for e in logstore.read(build.public_id, 0, 10_000)
            if e["text"].startswith("[build] image committed")
        ),
        float("nan"),
    )
    return {
        "total": total,
        "approve -> build queued": ms(request.approved_at, build.queued_at),
        "build (queued -> ended, incl. commit)": ms(build.queued_at, build.finished_at),
        "  of which: image commit": commit_s * 1000,
        "start (release queued -> process)": ms(
            process.run.queued_at, process.run.process_started_at
        ),
        "health (process -> healthy)": ms(process.run.process_started_at, process.ready_at),
        "switch (healthy -> route live)": ms(process.ready_at, request.live_at),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    workspace, asker, reviewer = setup_instance()
    from django.conf import settings

    procs = [
        start_daphne(PORT),
        start(
            [
                str(BIN / "celery"),
                "-A",
                "config",
                "worker",
                "-Q",
                worker_queues(),
                "--pool",
                "threads",
                "--concurrency",
                "4",
                "--without-heartbeat",
                "--without-mingle",
                "--without-gossip",
            ],
            "worker",
        ),
        start([sys.executable, "manage.py", "runner_agent"], "agent"),
    ]
    results, loads = [], []
    try:
        deadline = time.monotonic() + 60
        while "runner agent started" not in (DATA_DIR / "agent.log").read_text():
            assert time.monotonic() < deadline, "agent did not start"
            time.sleep(0.1)
        deploy(workspace, asker, reviewer, "v0")  # warm-up: the first release
        for i in range(1, args.rounds + 1):
            load = Load()
            load.thread.start()
            time.sleep(1)  # the load is steady before the switch starts
            results.append(deploy(workspace, asker, reviewer, f"v{i}"))
            time.sleep(settings.RELEASE_DRAIN_S + 2)  # past the old process's stop
            load.stop.set()
            load.thread.join()
            loads.append(load)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(20)

    med = statistics.median
    print(f"\nApproval -> release URL answers the new version, {args.rounds} rounds (median ms)")
    for key in results[0]:
        print(f"  {key:44} {med(r[key] for r in results):9.0f}")
    print("\nLoad at 20 req/s across each switch (until the old process was stopped)")
    for i, load in enumerate(loads, 1):
        print(
            f"  round {i}: {load.sent} requests, {load.failed} failed, versions seen "
            f"{sorted(load.bodies)}" + (f"; {load.failures[:3]}" if load.failures else "")
        )
    print(f"goal: zero failed requests; total failed {sum(x.failed for x in loads)}")


if __name__ == "__main__":
    main()
