"""Flood benchmark (issue 32, item 7), run by hand: `.venv/bin/python bench/flood.py`.

One sandbox floods: `yes ''` for --seconds (60) at its default cpus, as a run and then
as a session exec, of the team `flood`. Meanwhile another team's (`quiet`) session
times `echo hi` execs through the API, one after another, as many as fit in the flood;
the same number are timed just before it with nothing flooding (quiet). Per runtime
(runc, gVisor) and case: the echo's p50 and p95 quiet and flooded and their ratio, the
CPU dockerd (and containerd) and the runner agent used during the flood, apart, and
what the flood's log kept (entries) and dropped (the counted notes of its budget). The
case `null` is the control: the same `yes` as an exec, its output to /dev/null — what
the sandbox's own CPU costs the others on this machine, with no log path at all.

Uses its own DATA_DIR (var/bench-flood), Redis db 5, and its own daphne, Celery worker
and runner agent. Goal: flooded p50 <= 1.5x quiet.
"""

import argparse
import os
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = ROOT / "var" / "bench-flood"
sys.path.insert(0, str(ROOT))
from bench.common import (  # noqa: E402
    ApiClient,
    cpu_seconds,
    engine_pids,
    fresh_instance,
    p95,
    start_stack,
    stop_all,
    team_with_workspace,
    use_instance,
)

use_instance(DATA_DIR, 5)
from sandbox.images import REPOSITORY, recipe_tag  # noqa: E402

# This checkout's own image (its exec channel), not whatever the shared alias points at.
os.environ.setdefault("SANDBOX_IMAGE", f"{REPOSITORY}:{recipe_tag()}")

PORT = 18773
NOTE = re.compile(rb'"stream":"system","text":"(\d+) lines dropped: output over the budget')


def setup_instance() -> dict[str, str]:
    """Two teams, a workspace each; a token each."""
    fresh_instance(DATA_DIR)
    return {slug: team_with_workspace(slug, slug) for slug in ("flood", "quiet")}


def set_runtime(runtime: str) -> None:
    """The flood workspace's runs under `runtime` (its admin writes, so it is approved)."""
    from django.contrib.auth import get_user_model

    from accounts.access import Actor
    from workspaces import actions
    from workspaces.changes import Change
    from workspaces.models import Workspace

    text = f'[sandbox]\nruntime = "{runtime}"\n'.encode()
    workspace = Workspace.objects.get(slug="flood")
    admin = get_user_model().objects.get(username="flood")
    change = Change("write", "workspace.toml", text)
    actions.commit_changes(workspace, Actor(admin), [change], f"runs under {runtime}")


class Client(ApiClient):
    """The API as the benchmark uses it: the time of one `echo hi` exec."""

    def echo_ms(self, session: dict) -> float:
        start = time.perf_counter()
        row = self.call(
            "POST", f"/sessions/{session['id']}/exec", {"command": "echo hi", "wait_seconds": 60}
        )
        took = (time.perf_counter() - start) * 1000
        assert row["state"] == "ended" and [e["text"] for e in row["output"]] == ["hi"], row
        return took


def log_figures(public_id: str) -> tuple[int, int]:
    """(entries kept, lines dropped as its notes count them) of a log in the store."""
    from logs import logstore

    dropped = 0
    with open(logstore.paths(public_id)[0], "rb") as f:
        while block := f.read(1 << 24):
            # A note is one JSON line: whole in a block but for one cut at its edge,
            # which costs at most one note's count in a figure of millions.
            dropped += sum(int(m) for m in NOTE.findall(block))
    return logstore.count(public_id), dropped


def flood_case(
    case: str, flood: Client, quiet: Client, quiet_session: dict, runtime: str, args: Any
) -> dict[str, Any]:
    command = f"timeout {args.seconds} yes ''; true"
    if case == "null":  # the control: the same CPU in the sandbox, no output to carry
        command = f"timeout {args.seconds} yes '' > /dev/null; true"
    base = [quiet.echo_ms(quiet_session) for _ in range(args.echoes)]
    watched = {"agent": args.agent_pid, **engine_pids()}
    before = {name: cpu_seconds([pid]) for name, pid in watched.items()}
    started = time.monotonic()
    if case == "run":
        row = flood.call("POST", "/workspaces/flood/runs", {"command": command})
        path, active = f"/runs/{row['id']}", {"queued", "preparing", "running"}
    else:
        session = flood.session("flood", runtime=runtime)
        started = time.monotonic()
        before = {name: cpu_seconds([pid]) for name, pid in watched.items()}
        body = {"command": command, "detach": True}
        row = flood.call("POST", f"/sessions/{session['id']}/exec", body)
        path, active = f"/execs/{row['id']}", {"queued", "running"}
    while flood.call("GET", path)["state"] in ("queued", "preparing"):
        time.sleep(0.05)
    flooded: list[float] = []
    while time.monotonic() - started < args.seconds - 1 or len(flooded) < 3:
        flooded.append(quiet.echo_ms(quiet_session))
        if flood.call("GET", path)["state"] not in active:
            break
    while flood.call("GET", path)["state"] in active:
        time.sleep(0.1)
    took = time.monotonic() - started
    after = {name: cpu_seconds([pid]) for name, pid in watched.items()}
    if case == "exec":
        flood.call("POST", f"/sessions/{session['id']}/stop")
    kept, dropped = log_figures(row["id"])
    return {
        "quiet": base,
        "flooded": flooded,
        "cpu": {name: after[name] - before[name] for name in watched},
        "seconds": took,
        "kept": kept,
        "dropped": dropped,
    }


def lines_cost(flood: Client, runtime: str, args: Any) -> dict[str, tuple[float, int]]:
    """The agent's CPU for --lines empty lines from a run and from a session exec, with
    nothing else going on: (CPU seconds, entries kept)."""
    command = f"yes '' | head -n {args.lines}"
    session = flood.session("flood", runtime=runtime)
    figures = {}
    for case in ("run", "exec"):
        before = cpu_seconds([args.agent_pid])
        if case == "run":
            row = flood.call("POST", "/workspaces/flood/runs", {"command": command})
            path, active = f"/runs/{row['id']}", {"queued", "preparing", "running"}
        else:
            body = {"command": command, "detach": True}
            row = flood.call("POST", f"/sessions/{session['id']}/exec", body)
            path, active = f"/execs/{row['id']}", {"queued", "running"}
        while flood.call("GET", path)["state"] in active:
            time.sleep(0.1)
        figures[case] = (cpu_seconds([args.agent_pid]) - before, log_figures(row["id"])[0])
    flood.call("POST", f"/sessions/{session['id']}/stop")
    return figures


def report(runtime: str, case: str, f: dict[str, Any]) -> None:
    quiet, flooded = f["quiet"], f["flooded"]
    ratio = statistics.median(flooded) / statistics.median(quiet)
    what = "an exec to /dev/null (control)" if case == "null" else f"a {case}"
    print(f"\n{runtime}, flood as {what} ({f['seconds']:.0f} s from its start to its end)")
    print(f"  {'other team echo hi exec':34} {'n':>4} {'p50 ms':>8} {'p95 ms':>8} {'ratio':>7}")
    print(f"  {'quiet':34} {len(quiet):4} {statistics.median(quiet):8.1f} {p95(quiet):8.1f}")
    print(
        f"  {'during the flood':34} {len(flooded):4} {statistics.median(flooded):8.1f} "
        f"{p95(flooded):8.1f} {ratio:6.2f}x"
    )
    seconds = f["seconds"]
    cpu = ", ".join(
        f"{name} {s:.1f} s ({100 * s / seconds:.0f}% of a core)" for name, s in f["cpu"].items()
    )
    print(f"  CPU during the flood: {cpu}")
    print(f"  the flood's log: {f['kept']:,} entries kept, {f['dropped']:,} lines dropped (noted)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=60, help="how long `yes ''` runs")
    parser.add_argument("--echoes", type=int, default=50, help="quiet echoes per case")
    parser.add_argument("--runtimes", default="runc,gvisor")
    parser.add_argument("--cases", default="run,exec,null")
    parser.add_argument("--lines", type=int, default=100_000, help="0: skip the lines' cost")
    args = parser.parse_args()
    tokens = setup_instance()
    procs = start_stack(PORT, DATA_DIR)
    args.agent_pid = procs[2].pid
    results, costs = [], []
    try:
        flood, quiet = Client(PORT, tokens["flood"]), Client(PORT, tokens["quiet"])
        for runtime in args.runtimes.split(","):
            set_runtime(runtime)
            quiet_session = quiet.session("quiet", runtime=runtime)
            for _ in range(3):  # warm: connections, the channel, the page cache
                quiet.echo_ms(quiet_session)
            if args.lines:
                for case, (cpu, kept) in lines_cost(flood, runtime, args).items():
                    costs.append(
                        f"{runtime}: {args.lines:,} empty lines from a {case}: agent CPU "
                        f"{cpu:.2f} s, {kept:,} entries kept"
                    )
                    print(costs[-1])
            for case in args.cases.split(","):
                figures = flood_case(case, flood, quiet, quiet_session, runtime, args)
                results.append((runtime, case, figures))
                report(runtime, case, figures)
            quiet.call("POST", f"/sessions/{quiet_session['id']}/stop")
    finally:
        stop_all(procs)
    print("\nsummary")
    print("\n".join(costs))
    for runtime, case, figures in results:
        report(runtime, case, figures)
    print("\ngoal: the other team's echo p50 during the flood <= 1.5x quiet")


if __name__ == "__main__":
    main()
