"""Run benchmark: `echo hi` end to end through Berth vs the same work with bare docker-py,
and 100,000 lines of a real run delivered over the WebSocket.

Run by hand (not a test): `.venv/bin/python bench/runs.py [--runs N]`. It uses its own
DATA_DIR (var/bench-runs) and Redis db 8, and starts its own daphne, Celery worker and
runner agent. Goals (issue 4): Berth ≤ 1.25x the bare sequence; ≥ 50,000 lines/s.
"""

import argparse
import http.client
import json
import os
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = ROOT / "var" / "bench-runs"
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    engine_pids,
    fresh_instance,
    p95,
    start_stack,
    stop_all,
    team_with_workspace,
    use_instance,
)
from bench.run_logs import messages, websocket  # noqa: E402

# After those imports: bench.run_logs sets its own DATA_DIR when imported.
use_instance(DATA_DIR, 8)


def setup_instance() -> str:
    fresh_instance(DATA_DIR)
    return team_with_workspace(scopes=["workspace:read", "run"])


def seconds(a: str | None, b: str | None) -> float:
    if not a or not b:
        return float("nan")
    return (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds() * 1000


def cpu_of(pids: dict[str, int]) -> dict[str, float]:
    """CPU ms used so far by each process, its waited-for children included."""
    hz = os.sysconf("SC_CLK_TCK")
    out = {}
    for name, pid in pids.items():
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        out[name] = sum(int(f) for f in fields[11:15]) * 1000 / hz
    return out


def add(total: dict[str, float], before: dict[str, float], after: dict[str, float]) -> None:
    for name in total:
        total[name] += after[name] - before[name]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--lines", type=int, default=100_000)
    args = parser.parse_args()
    token = setup_instance()
    port = 18767
    procs = start_stack(port, DATA_DIR)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def call(method: str, path: str, body: dict | None = None) -> dict:
        conn.request(method, path, json.dumps(body) if body else None, headers)
        response = conn.getresponse()
        return json.loads(response.read())

    def berth_echo() -> dict:
        sent = datetime.now(UTC)
        run = call("POST", "/api/v1/workspaces/app/runs", {"command": "echo hi"})
        posted = datetime.now(UTC)
        # As a client would: one request that waits for the end (woken by its signal).
        while run["state"] in ("queued", "preparing", "running"):
            run = call("GET", f"/api/v1/runs/{run['id']}?wait=60")
        woken = datetime.now(UTC)
        logs = call("GET", f"/api/v1/runs/{run['id']}/logs")
        assert run["state"] == "succeeded" and logs["complete"], (run, logs)
        assert [e["text"] for e in logs["entries"] if e["stream"] != "system"] == ["hi"], logs
        # The client's side of it, on the same clock as the run's timestamps.
        run["timings"].update(
            sent=sent.isoformat(),
            posted=posted.isoformat(),
            woken=woken.isoformat(),
            logs=datetime.now(UTC).isoformat(),
        )
        return run

    from sandbox.docker import _host_config
    from sandbox.engine import engine
    from sandbox.models import Sandbox
    from workspaces.archive import tree_tarball
    from workspaces.models import Workspace
    from workspaces.store import open_store

    workspace = Workspace.objects.get(slug="app")
    with open_store(workspace) as store:
        tarball = tree_tarball(store, store.branch_head("main") or "")

    def bare_echo(i: int) -> dict[str, float]:
        """The same work with docker-py alone: volume, create (same hardening),
        put_archive of the same tree, start, wait, logs, remove; the time of each step."""
        marks = {"begun": time.perf_counter()}
        name = Sandbox.engine_name(f"bare{i:08d}")
        template = Sandbox(
            name=name,
            image="berth-sandbox:bookworm",
            limits={"cpus": 1.0, "memory_mb": 512, "disk_mb": 2048, "pids": 256, "nofile": 4096},
            runtime="runc",
        )
        engine().volumes.create(name)
        container = engine().containers.create(
            "berth-sandbox:bookworm",
            ["sh", "-c", "echo hi"],
            name=name,
            **_host_config(template, "runc", [], None, None),
        )
        container.put_archive("/workspace", tarball)
        marks["hydrated"] = time.perf_counter()
        container.start()
        marks["started"] = time.perf_counter()
        container.wait()
        marks["exited"] = time.perf_counter()
        assert container.logs() == b"hi\n"
        marks["logs"] = time.perf_counter()
        container.remove(force=True)
        engine().volumes.get(name).remove(force=True)
        marks["removed"] = time.perf_counter()
        return marks

    try:
        berth_echo()  # warm up: first connections, first container of the session
        bare_echo(0)
        berth_ms, bare_ms, phases, bare_phases = [], [], [], []
        watched = {
            "daphne": procs[0].pid,
            "worker": procs[1].pid,
            "agent": procs[2].pid,
            "bench": os.getpid(),
            **engine_pids(),
        }
        berth_cpu = dict.fromkeys(watched, 0.0)
        bare_cpu = dict.fromkeys(watched, 0.0)
        for i in range(args.runs):  # interleaved: both see the same machine noise
            before = cpu_of(watched)
            t = time.perf_counter()
            run = berth_echo()
            berth_ms.append((time.perf_counter() - t) * 1000)
            add(berth_cpu, before, cpu_of(watched))
            phases.append(run["timings"])
            before = cpu_of(watched)
            t = time.perf_counter()
            bare_phases.append(bare_echo(i + 1))
            bare_ms.append((time.perf_counter() - t) * 1000)
            add(bare_cpu, before, cpu_of(watched))

        run = call("POST", "/api/v1/workspaces/app/runs", {"command": f"seq 1 {args.lines}"})
        stream = websocket(port, f"/ws/runs/{run['id']}/logs?after=0", token)
        # The clock starts at the first line of output: the "[setup] skipped" note comes
        # before the container starts, and a start is not streaming (it is timed above).
        seq, line, first, noted, last, early = 0, 0, 0.0, 0.0, 0.0, 0
        for message in messages(stream):
            if message["type"] == "end":
                break
            noted = noted or time.monotonic()
            for entry in message["entries"]:
                seq += 1
                assert entry["seq"] == seq, entry
                if entry["stream"] == "system":
                    continue  # "[setup] skipped: cache hit"
                line += 1
                assert entry["text"] == str(line), entry
            if line and not first:
                first, early = time.monotonic(), line  # those came before the clock
            last = time.monotonic()
        assert line == args.lines, f"{line} of {args.lines} lines"
    finally:
        stop_all(procs)

    print(f"\n`echo hi`, {args.runs} runs each, interleaved\n")
    print(f"{'path':40} {'median ms':>10} {'p95 ms':>10} {'ratio':>8}")
    ratio = statistics.median(berth_ms) / statistics.median(bare_ms)
    print(
        f"{'Berth: API POST -> end + full log':40} {statistics.median(berth_ms):10.1f} "
        f"{p95(berth_ms):10.1f} {ratio:7.2f}x"
    )
    print(f"{'bare docker-py sequence':40} {statistics.median(bare_ms):10.1f} {p95(bare_ms):10.1f}")
    print("\nBerth phase breakdown (median ms)")
    steps = [
        ("client sends POST -> queued", "sent", "queued_at"),
        ("queued -> POST answered", "queued_at", "posted"),
        ("queued -> worker picked up", "queued_at", "started_at"),
        ("picked up -> hydrated (create, put_archive)", "started_at", "hydrated_at"),
        ("hydrated -> process started (setup: cache hit)", "hydrated_at", "process_started_at"),
        ("process started -> end written", "process_started_at", "finished_at"),
        ("end written -> the waiting GET answered", "finished_at", "woken"),
        ("then: GET of the full log", "woken", "logs"),
    ]
    for label, a, b in steps:
        print(f"  {label:46} {statistics.median(seconds(p[a], p[b]) for p in phases):8.1f}")
    print("  (the last step includes reading /workspace back for changes and artifacts)")
    print("\nbare phase breakdown (median ms)")
    marks = ["begun", "hydrated", "started", "exited", "logs", "removed"]
    labels = ["volume, create, put_archive", "start", "wait", "logs", "remove container, volume"]
    for label, a, b in zip(labels, marks, marks[1:], strict=False):
        print(f"  {label:46} {statistics.median((p[b] - p[a]) * 1000 for p in bare_phases):8.1f}")
    print("\nCPU per run by process (ms; children included: runc, shims)")
    print(f"  {'process':12} {'Berth':>8} {'bare':>8}")
    for name in watched:
        print(f"  {name:12} {berth_cpu[name] / args.runs:8.1f} {bare_cpu[name] / args.runs:8.1f}")
    rate = (args.lines - early) / (last - first) if last > first else float("inf")
    print(
        f"\n{args.lines:,} lines of `seq` over the WebSocket: {rate:,.0f} lines/s, 0 lost, in order"
    )
    with_start = args.lines / (last - noted) if last > noted else float("inf")
    print(f"  (from the setup note before the container's start: {with_start:,.0f} lines/s)")
    print("goals: Berth <= 1.25x bare; >= 50,000 lines/s")


if __name__ == "__main__":
    main()
