"""Run-log benchmark: 100,000 lines over a real daphne WebSocket, replayed and live.

Run by hand (not a test): `.venv/bin/python bench/run_logs.py [--lines N]`.
It uses its own DATA_DIR (var/bench-logs), starts its own daphne, and prints lines/s.
The live case writes from a separate process, as the runner agent does.
Goal (issue 6): ≥ 50,000 lines/s with none lost.
"""

import argparse
import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = ROOT / "var" / "bench-logs"
sys.path.insert(0, str(ROOT))
os.environ.update(DJANGO_SETTINGS_MODULE="config.settings", DATA_DIR=str(DATA_DIR))

from bench.common import start_daphne  # noqa: E402

AGENT = """
import sys, time, django
django.setup()
from logs import logstore
run_id, total = sys.argv[1], int(sys.argv[2])
with logstore.LogWriter(run_id) as w:
    signalled = 0.0
    for n in range(1, total + 1):
        w.append("stdout", b"line %d\\n" % n)
        if time.monotonic() - signalled > 0.05:
            logstore.signal(run_id, n)
            signalled = time.monotonic()
logstore.signal(run_id, total)
"""


def setup_instance() -> str:
    """A fresh instance with one workspace; returns a token with the `run` scope."""
    shutil.rmtree(DATA_DIR, ignore_errors=True)
    DATA_DIR.mkdir(parents=True)
    import django

    django.setup()
    from bench.common import migrate

    migrate()
    from accounts import actions as accounts

    team, _ = accounts.create_team("bench")
    user, _ = accounts.create_user(team, "bench", "admin", None, "bench-password-1")
    _, token = accounts.create_token(team, user, "bench", ["run"], None)
    return token


def new_run() -> str:
    from django.contrib.auth.models import User

    from accounts.access import Actor
    from accounts.models import Team
    from runs.models import Run
    from workspaces import actions
    from workspaces.models import Workspace

    team = Team.objects.get(slug="bench")
    workspace = Workspace.objects.filter(team=team).first() or actions.create_workspace(
        team, Actor(User.objects.get(username="bench")), "Logs", "logs"
    )
    return Run.objects.create(
        workspace=workspace,
        ref="main",
        commit="0" * 40,
        command="yes",
        image="bench",
        state="running",
    ).public_id


def finish(run_id: str) -> None:
    from logs import logstore
    from runs.models import Run

    Run.objects.get(public_id=run_id).finish("succeeded", "exit_zero", "Exited with 0.", 0)
    logstore.signal(run_id, logstore.count(run_id))


def websocket(port: int, path: str, token: str) -> BinaryIO:
    """A bare RFC 6455 client: enough to read a server's unmasked text frames."""
    sock = socket.create_connection(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        (
            f"GET {path} HTTP/1.1\r\nHost: localhost:{port}\r\n"
            f"Origin: http://localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            f"Authorization: Bearer {token}\r\n\r\n"
        ).encode()
    )
    stream = sock.makefile("rb")
    status = stream.readline()
    assert b" 101 " in status, status
    while stream.readline() not in (b"\r\n", b""):
        pass
    return stream


def messages(stream: BinaryIO) -> Iterator[dict]:
    parts: list[bytes] = []
    while True:
        head = stream.read(2)
        if len(head) < 2:
            return
        opcode, size = head[0] & 0x0F, head[1] & 0x7F
        if size == 126:
            size = struct.unpack(">H", stream.read(2))[0]
        elif size == 127:
            size = struct.unpack(">Q", stream.read(8))[0]
        payload = stream.read(size)
        if opcode == 8:
            return
        if opcode in (0, 1):
            parts.append(payload)
            if head[0] & 0x80:
                yield json.loads(b"".join(parts))
                parts = []


def receive(stream: BinaryIO, total: int) -> tuple[float, str]:
    """Seconds from the first entry to the last; checks every seq arrives once, in order."""
    seq, first, last = 0, 0.0, 0.0
    for message in messages(stream):
        if message["type"] == "end":
            assert seq == total, (seq, total)
            return last - first, message["state"]
        for entry in message["entries"]:
            seq += 1
            assert entry["seq"] == seq and entry["text"] == f"line {seq}", entry
        first = first or time.monotonic()
        last = time.monotonic()
    raise AssertionError(f"closed after {seq} of {total}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=100_000)
    args = parser.parse_args()
    token = setup_instance()
    port = 18766
    server = start_daphne(port)
    from logs.logstore import LogWriter

    try:
        replayed = new_run()
        with LogWriter(replayed) as w:
            for n in range(1, args.lines + 1):
                w.append("stdout", b"line %d\n" % n)
        finish(replayed)
        started = time.monotonic()
        receive(websocket(port, f"/ws/runs/{replayed}/logs", token), args.lines)
        replay_s = time.monotonic() - started  # from connecting: the whole replay

        live = new_run()
        stream = websocket(port, f"/ws/runs/{live}/logs", token)
        agent = subprocess.Popen([sys.executable, "-c", AGENT, live, str(args.lines)], cwd=ROOT)

        def end_when_written() -> None:
            agent.wait()
            finish(live)

        ended = threading.Thread(target=end_when_written)
        ended.start()
        live_s, _ = receive(stream, args.lines)
        ended.join()
    finally:
        server.terminate()
        server.wait()
    print(f"\n{args.lines:,} lines over daphne's WebSocket, none lost, in order\n")
    print(f"replay (stored, from connect):   {args.lines / replay_s:12,.0f} lines/s")
    print(f"live (separate writer process):  {args.lines / live_s:12,.0f} lines/s")
    print("\ngoal: ≥ 50,000 lines/s")


if __name__ == "__main__":
    main()
