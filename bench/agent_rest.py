"""The runner agent's CPU at rest (issue 32, item 13), run by hand:
`.venv/bin/python bench/agent_rest.py [--counts 0,5,20] [--seconds 30]`.

For each count N: N idle live sandboxes — sessions, ready, nothing running in them —
opened through the API and left to settle; then the agent's own user + system CPU time
(from /proc) over `--seconds`, as a share of one core, with dockerd's beside it (the
engine answers the agent's calls: its CPU is part of what the agent's polling costs).
Counts grow in one run: the sessions of a smaller count stay for the next.

Uses its own DATA_DIR (var/bench-agent-rest), Redis db 12, and its own daphne, Celery
worker and runner agent. Goal: ≤ 5% of a core with 20 idle sandboxes.
"""

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = ROOT / "var" / "bench-agent-rest"
sys.path.insert(0, str(ROOT))
from bench.common import (  # noqa: E402
    ApiClient,
    cpu_seconds,
    fresh_instance,
    start_stack,
    stop_all,
    team_with_workspace,
    use_instance,
)

use_instance(
    DATA_DIR,
    12,
    # Room for 20 sessions of one team, none frozen or stopped by its clocks meanwhile.
    SESSION_MAX_PER_TEAM="40",
    RUNNER_SLOTS="64",
    QUOTA_MAX_CONCURRENT_RUNS="64",
    SESSION_IDLE_FREEZE_S="3600",
)

PORT = 18793
SETTLE_S = 10.0


def setup_instance() -> str:
    fresh_instance(DATA_DIR)
    return team_with_workspace()


def open_ready(client: ApiClient, count: int) -> list[dict]:
    """`count` more sessions, opened together, once every one is ready."""
    opened = [client.call("POST", "/workspaces/app/sessions", {}) for _ in range(count)]
    deadline = time.monotonic() + 600
    ready = []
    for session in opened:
        while session["state"] != "ready":
            assert session["state"] == "starting" and time.monotonic() < deadline, session
            time.sleep(0.5)
            session = client.call("GET", f"/sessions/{session['id']}")
        ready.append(session)
    return ready


def pid_of(name: str) -> int | None:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == name:
                    return int(entry.name)
            except OSError:
                continue
    return None


def profile(pid: int, seconds: float, out: str) -> None:
    """What the agent does at rest, sampled by py-spy (not a dependency: `uvx py-spy`
    fetches it), as speedscope JSON and a top-of-stack summary."""
    import shutil
    import subprocess

    subprocess.run(
        [
            shutil.which("uvx") or str(Path.home() / ".local" / "bin" / "uvx"),
            "py-spy",
            "record",
            "--nonblocking",
            "-p",
            str(pid),
            "-d",
            str(int(seconds)),
            "-r",
            "50",
            "-f",
            "raw",
            "-o",
            out,
        ],
        check=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--counts", default="0,5,20")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--profile", help="py-spy's collapsed stacks of the last count here")
    args = parser.parse_args()
    counts = sorted(int(c) for c in args.counts.split(","))

    token = setup_instance()
    procs = start_stack(PORT, DATA_DIR)
    agent, dockerd = procs[2].pid, pid_of("dockerd")
    rows = []
    try:
        client = ApiClient(PORT, token)
        live = 0
        for count in counts:
            if count > live:
                open_ready(client, count - live)
                live = count
            time.sleep(SETTLE_S)  # the starts' own work (follows, first counts) done
            watched = [agent] + ([dockerd] if dockerd else [])
            before, start = [cpu_seconds([p]) for p in watched], time.monotonic()
            time.sleep(args.seconds)
            took = time.monotonic() - start
            grew = [(cpu_seconds([p]) - b) / took for p, b in zip(watched, before, strict=True)]
            used, engine = grew[0], grew[1] if dockerd else float("nan")
            if args.profile and count == counts[-1]:
                profile(agent, args.seconds, args.profile)
            rows.append((count, used, engine))
            print(f"  {count:>3} idle sessions: agent {100 * used:5.1f}% of a core", flush=True)
    finally:
        from sessions.models import Session

        stop_all(procs)
        from sandbox import backend
        from sandbox.models import Sandbox

        for sandbox in Sandbox.objects.all():
            backend.remove_sandbox(sandbox.name)
        for session in Session.objects.all():
            backend.remove_sandbox(session.volume)

    load = os.getloadavg()[0]
    print(f"\nThe runner agent at rest ({args.seconds:.0f} s each; load average {load:.1f})")
    print(f"{'idle sandboxes':>15} {'agent % core':>13} {'dockerd % core':>15}")
    for count, used, engine in rows:
        print(f"{count:>15} {100 * used:>13.1f} {100 * engine:>15.1f}")
    print("goal: agent ≤ 5% of a core at 20")


if __name__ == "__main__":
    main()
