"""Session benchmark (issue 25), run by hand: `.venv/bin/python bench/sessions.py`.

Per runtime (runc, gVisor), side by side in one run:
- `echo hi` through the API in a ready session, answered with its output (one POST that
  waits), interleaved with docker-py's `exec_run` of the same command in the same
  container: medians, p95 and their ratio;
- resume: a frozen session, then `echo hi` through the API until its answer;
- a write (`PUT …/files/…`, which answers once every ready session of the branch has
  applied it) until the write is visible in the session;
- an agent's edit→test turn: write a test file, then exec a small unittest, minus the
  test's own time (the same command timed inside the sandbox, so no exec overhead);
- a terminal's keystroke → its echo on the browser's socket, through daphne, the runner
  agent and the channel, interleaved with the same keystroke written straight onto the
  channel's own socket inside the sandbox (the floor: no daphne, Redis or agent).

Uses its own DATA_DIR (var/bench-sessions), Redis db 6, and its own daphne, Celery worker
and runner agent. Goals: echo ≤ 100 ms p50 and ≤ 1.3x exec_run (aim ≤ 25 ms); resume ≤
150 ms; write → visible ≤ 200 ms p50; an edit→test turn ≤ 150 ms of platform time;
keystroke → echo ≤ 30 ms p50 through daphne.
"""

import argparse
import asyncio
import base64
import json
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = ROOT / "var" / "bench-sessions"
sys.path.insert(0, str(ROOT))
from bench.common import (  # noqa: E402
    ApiClient,
    fresh_instance,
    p95,
    start_stack,
    stop_all,
    team_with_workspace,
    use_instance,
)

use_instance(DATA_DIR, 6)

PORT = 18771
OWN_TIME = (
    "s=$(date +%s%N); python3 -m unittest -q test_small 2>/dev/null; e=$(date +%s%N); "
    "echo $((e - s))"
)
TEST = """import unittest


class Small(unittest.TestCase):
    def test_adds(self):
        self.assertEqual(1 + {n}, {m})


if __name__ == "__main__":
    unittest.main()
"""


def setup_instance() -> str:
    fresh_instance(DATA_DIR)
    return team_with_workspace()


class Client(ApiClient):
    """The API as the benchmark uses it: an exec's answer, a session's state."""

    def exec(self, session: dict, command: str) -> dict:
        row = self.call(
            "POST", f"/sessions/{session['id']}/exec", {"command": command, "wait_seconds": 60}
        )
        assert row["state"] == "ended", row
        return row

    def wait_state(self, session: dict, state: str) -> None:
        deadline = time.monotonic() + 60
        while self.call("GET", f"/sessions/{session['id']}")["state"] != state:
            assert time.monotonic() < deadline, f"not {state}"
            time.sleep(0.05)


def out(row: dict) -> list[str]:
    return [e["text"] for e in row["output"] if e["stream"] == "stdout"]


def container_of(session: dict) -> Any:
    from sandbox.engine import engine
    from sessions.models import Session

    row = Session.objects.select_related("run__sandbox").get(public_id=session["id"])
    assert row.run is not None and row.run.sandbox is not None
    return engine().containers.get(row.run.sandbox.name)


def timed_ms(fn: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn()
    return (time.perf_counter() - start) * 1000, result


def direct_socket(session: dict, terminal: str) -> socket.socket:
    """The terminal's stream straight from the channel, as the runner agent opens it."""
    from sessions.channel import channel_of, opened
    from sessions.models import Session

    row = Session.objects.select_related("run__sandbox").get(public_id=session["id"])
    assert row.run is not None and row.run.sandbox is not None
    # With the channel's handshake, as the agent does (docs/security.md, 32).
    sock, mine = asyncio.run(opened(channel_of(row.run.sandbox)))
    sock.setblocking(True)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    request = {"op": "pty_attach", "id": terminal, "after": 1 << 40, "proof": mine}
    sock.sendall(json.dumps(request).encode() + b"\n")
    return sock


def bench_terminal(client: Client, token: str, session: dict, runs: int) -> tuple[list, list]:
    from websockets.sync.client import connect

    term = client.call("POST", f"/sessions/{session['id']}/terminals")
    ws = connect(
        f"ws://127.0.0.1:{PORT}/ws/terminals/{term['id']}",
        additional_headers={
            "Authorization": f"Bearer {token}",
            "Origin": f"http://localhost:{PORT}",
        },
    )

    def until_echo(char: str) -> None:
        seen = ""
        while char not in seen:
            message = json.loads(ws.recv(timeout=30))
            if message["type"] == "output":
                seen += base64.b64decode(message["data"]).decode(errors="replace")

    until_echo("$")  # the prompt: the shell is up
    direct = direct_socket(session, term["id"])
    reader = direct.makefile("rb")
    reader.readline()  # its first answer

    def direct_echo(char: str) -> None:
        direct.sendall(json.dumps({"i": base64.b64encode(char.encode()).decode()}).encode() + b"\n")
        seen = b""
        while char.encode() not in seen:
            line = json.loads(reader.readline())
            seen += base64.b64decode(line.get("o") or "")

    through, floor = [], []
    letters = "abcdefghijklmnopqrstuvwxyz"
    for i in range(runs + 3):
        char = letters[i % len(letters)]
        start = time.perf_counter()
        ws.send(json.dumps({"type": "input", "data": char}))
        until_echo(char)
        took = (time.perf_counter() - start) * 1000
        other = letters[(i + 13) % len(letters)]
        took_direct, _ = timed_ms(lambda c=other: direct_echo(c))
        # Both views see both echoes: each drains the other's before the next round.
        until_echo(other)
        if i >= 3:  # warm-up rounds dropped
            through.append(took)
            floor.append(took_direct)
    ws.close()
    direct.close()
    return through, floor


def bench_runtime(
    client: Client, token: str, runtime: str, runs: int, resumes: int, parts: set[str]
) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    session = client.session(runtime=runtime)
    if "terminal" in parts:
        figures["keys"] = bench_terminal(client, token, session, runs)
    container = container_of(session)
    for _ in range(3):  # warm: connections, the channel, the page cache
        client.exec(session, "echo hi")
        container.exec_run(["sh", "-c", "echo hi"])
    berth, bare = [], []
    for _ in range(runs):  # interleaved: both see the same machine noise
        took, row = timed_ms(lambda: client.exec(session, "echo hi"))
        assert out(row) == ["hi"], row
        berth.append(took)
        took, result = timed_ms(lambda: container.exec_run(["sh", "-c", "echo hi"]))
        assert result.output == b"hi\n", result
        bare.append(took)
    figures["echo"] = (berth, bare)

    writes, turns, own = [], [], []
    for i in range(runs if "writes" in parts else 0):
        took, _ = timed_ms(
            lambda i=i: client.call(
                "PUT", "/workspaces/app/files/notes.txt", {"content": f"note {i}\n"}
            )
        )
        writes.append(took)
        assert out(client.exec(session, "cat notes.txt")) == [f"note {i}"]
        test = TEST.format(n=i, m=i + 1)
        start = time.perf_counter()
        client.call("PUT", "/workspaces/app/files/test_small.py", {"content": test})
        row = client.exec(session, "python3 -m unittest -q test_small")
        turns.append((time.perf_counter() - start) * 1000)
        assert row["reason"] == "exit_zero", row
        # The test's own time, measured inside the sandbox (no exec overhead counted).
        result = container.exec_run(["sh", "-c", OWN_TIME], workdir="/workspace")
        assert result.exit_code == 0, result
        own.append(int(result.output.split()[-1]) / 1e6)
    figures["write"] = writes
    figures["turn"] = (turns, own)
    client.call("POST", f"/sessions/{session['id']}/stop")

    frozen = client.session(runtime=runtime, idle_freeze_s=1)
    resumed = []
    for _ in range(resumes if "resume" in parts else 0):
        client.wait_state(frozen, "frozen")
        took, row = timed_ms(lambda: client.exec(frozen, "echo hi"))
        assert out(row) == ["hi"], row
        resumed.append(took)
    figures["resume"] = resumed
    client.call("POST", f"/sessions/{frozen['id']}/stop")
    return figures


def report(runtime: str, f: dict[str, Any]) -> None:
    berth, bare = f["echo"]
    turns, own = f["turn"]
    platform = [t - o for t, o in zip(turns, own, strict=True)]
    f["resume"] = f.get("resume") or []
    print(f"\n{runtime}")
    print(f"  {'figure':52} {'median ms':>10} {'p95 ms':>9} {'ratio':>7}")
    ratio = statistics.median(berth) / statistics.median(bare)
    rows = [
        ("echo hi through the API, answered with its output", berth, f"{ratio:6.2f}x"),
        ("docker-py exec_run, same container", bare, ""),
        ("resume from frozen -> the exec's answer", f["resume"], ""),
        ("write (PUT file) -> visible in the session", f["write"], ""),
        ("edit->test turn (write + exec unittest)", turns, ""),
        ("  the test's own time (inside the sandbox)", own, ""),
        ("  platform time of the turn", platform, ""),
    ]
    if f.get("keys"):
        keys, floor = f["keys"]
        keys_ratio = statistics.median(keys) / statistics.median(floor)
        rows += [
            ("keystroke -> echo through daphne and the agent", keys, f"{keys_ratio:6.2f}x"),
            ("keystroke -> echo on the channel's own socket", floor, ""),
        ]
    for label, values, extra in rows:
        if not values:
            continue
        print(f"  {label:52} {statistics.median(values):10.1f} {p95(values):9.1f} {extra:>7}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--resumes", type=int, default=8)
    parser.add_argument("--runtimes", default="runc,gvisor")
    parser.add_argument("--parts", default="writes,resume,terminal", help="besides echo")
    args = parser.parse_args()
    token = setup_instance()
    procs = start_stack(PORT, DATA_DIR)
    results = {}
    try:
        client = Client(PORT, token)
        for runtime in args.runtimes.split(","):
            results[runtime] = bench_runtime(
                client, token, runtime, args.runs, args.resumes, set(args.parts.split(","))
            )
    finally:
        stop_all(procs)
    for runtime, figures in results.items():
        report(runtime, figures)
    print(
        "\ngoals: echo <= 100 ms p50 and <= 1.3x exec_run (aim <= 25 ms); resume <= 150 ms;"
        " write -> visible <= 200 ms p50; edit->test turn <= 150 ms of platform time;"
        " keystroke -> echo <= 30 ms p50"
    )


if __name__ == "__main__":
    main()
