"""Nothing on the host is open to its other users (docs/security.md 28), on a whole Berth
started the way `make run` starts it (scripts/supervise), with a Redis of its own that
asks for a password as `scripts/host-setup redis` starts it.

As `nobody` the issue's attacker read the SQLite database (a browser session that signed
in as an admin), transcripts and repositories, and typed into another person's terminal
through Redis. Here: what the processes write into DATA_DIR is 0600/0700 and DATA_DIR
0700, `nobody` reads none of it, Redis refuses a client without the password, the
password is on no command line, and a message pushed into Redis without the channel
layer's key — onto the terminal relay's channel and onto every channel every process
listens on — is logged and dropped while the terminal, the runner agent and every
process go on (no restart).

The channel layer and the files are the same under runc and gVisor: the session here
runs under runc.
"""

import json
import os
import shutil
import socket
import stat
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest
import redis
from channels_redis.core import RedisChannelLayer
from websockets.sync.client import connect

from tests.support.servers import wait_for
from tests.support.stacks import PROGRAMS, Stack, supervised_stack
from tests.support.terminals import Screen

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    # Under /tmp, reachable by anyone: a refusal to `nobody` is DATA_DIR's own doing,
    # not that of a private folder above it.
    root = Path("/tmp") / f"berth-hostsec-{uuid.uuid4().hex[:8]}"
    try:
        with supervised_stack(root) as s:
            r = s.api(
                "POST", "/workspaces", {"name": "Shop", "slug": "shop", "template": "python-http"}
            )
            assert r.status_code == 201, r.text
            yield s
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def terminal(stack) -> dict:
    r = stack.api("POST", "/workspaces/shop/sessions", {})
    assert r.status_code == 201, r.text
    session = wait_for(
        lambda: stack.api("GET", f"/sessions/{r.json()['id']}").json(),
        timeout=180,
        interval=0.5,
        what="the session to settle",
        until=lambda s: s["state"] in ("ready", "failed", "stopped", "lost"),
    )
    assert session["state"] == "ready", session
    t = stack.api("POST", f"/sessions/{session['id']}/terminals")
    assert t.status_code == 201, t.text
    return {**t.json(), "session": session["id"]}


def as_nobody(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["runuser", "-u", "nobody", "--", *argv], capture_output=True, text=True)


def open_terminal(stack: Stack, term: dict):
    return connect(
        f"ws://127.0.0.1:{stack.port}/ws/terminals/{term['id']}",
        additional_headers={"Authorization": f"Bearer {stack.token}", "Origin": stack.url},
        open_timeout=10,
    )


def channel_key(prefix: str, channel: str) -> str:
    """Where channels_redis keeps a channel's messages (a process's own: up to its `!`)."""
    return prefix + (channel[: channel.index("!") + 1] if "!" in channel else channel)


def push(client: redis.Redis, prefix: str, channel: str, body: bytes) -> None:
    client.zadd(channel_key(prefix, channel), {body: time.time()})


def forged(channel: str, message: dict) -> bytes:
    """A plain msgpack message, as anyone who reaches Redis can write one."""
    if "!" in channel:
        message = {**message, "__asgi_channel__": channel}
    return os.urandom(12) + msgpack.packb(message)


def test_redis_refuses_a_client_without_the_password_which_is_on_no_command_line(stack):
    # What any local user's client hears, in Redis's own words.
    with socket.create_connection(("127.0.0.1", stack.redis.port), timeout=5) as s:
        s.sendall(b"PING\r\n")
        assert s.recv(200).startswith(b"-NOAUTH Authentication required")
    with pytest.raises(redis.RedisError, match=r"(?i)authenticat"):
        redis.Redis(port=stack.redis.port, socket_connect_timeout=2).ping()
    assert stack.redis.client().ping() is True
    password = stack.redis.password.encode()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            assert password not in cmdline.read_bytes(), f"the password is in {cmdline}"
        except (FileNotFoundError, ProcessLookupError):
            continue  # a process that ended meanwhile


def test_a_message_forged_into_redis_is_dropped_and_logged_and_everything_goes_on(stack, terminal):
    pids = {p: stack.pid(p) for p in PROGRAMS}
    prefix = f"berth-{stack.instance}"
    client = stack.redis.client()
    with open_terminal(stack, terminal) as ws:
        screen = Screen(ws)
        screen.read_until(lambda m: m["type"] == "attached")
        screen.type("echo one-$((1+1))\r")
        screen.read_until("one-2")

        # The attacker finds the viewer's channel among the session group's members,
        # and every channel any process listens on among all the groups'.
        groups = client.keys(f"{prefix}:group:*")
        members = {g: [m.decode() for m in client.zrange(g, 0, -1)] for g in groups}
        viewer = next(
            m for g, ms in members.items() if terminal["session"] in g.decode() for m in ms
        )
        relay = "terminals.local"
        typed = {"type": "terminal.input", "reply": viewer, "data": b"echo FORGED-$((2+2))\r"}
        push(client, prefix, relay, forged(relay, typed))
        shown = {"type": "terminal.output", "data": "Rk9SR0VE", "end": 1 << 40}
        push(client, prefix, viewer, forged(viewer, shown))
        listeners = {m for ms in members.values() for m in ms}
        assert len(listeners) >= 2, members  # the viewer and the runner agent at least
        for channel in listeners:
            push(client, prefix, channel, forged(channel, {"type": "log.signal", "seq": 1}))

        # Dropped and logged where received: by the runner agent (the relay) and by
        # daphne (the viewer's consumer).
        wait_for(
            lambda: "agent | " in dropped_lines(stack) and "web | " in dropped_lines(stack),
            timeout=30,
            what="the agent and daphne to log the forged messages",
        )
        assert f"channel {relay} " in dropped_lines(stack)

        # The same message sealed with the instance's key is typed (the door is real),
        # and the terminal, the relay and the consumer go on.
        key = (stack.data_dir / "channel_layer.key").read_text().strip()
        sealed = RedisChannelLayer(prefix=prefix, symmetric_encryption_keys=[key]).serialize(
            {**typed, "data": b"echo sealed-$((3+3))\r"}
        )
        push(client, prefix, relay, sealed)
        screen.read_until("sealed-6")
        screen.type("echo two-$((2+1))\r")
        screen.read_until("two-3")
        # Neither typed into the shell nor shown on the viewer's screen ("Rk9SR0VE").
        assert "FORGED" not in screen.text

    # Every process is the one that was there: none died of a forged message.
    assert {p: stack.pid(p) for p in PROGRAMS} == pids
    run = stack.wait_run(stack.run("shop", "echo after-$((4+4))"), timeout=180)
    assert run["state"] == "succeeded", run
    assert "after-8" in stack.output(run)


def dropped_lines(stack: Stack) -> str:
    return "\n".join(line for line in stack.log().splitlines() if "did not seal" in line)


def test_what_the_processes_write_into_data_dir_is_theirs_alone(stack, terminal):
    # Something cheap that writes a log, and the transcript the terminal above kept.
    run = stack.wait_run(stack.run("shop", "echo hello"), timeout=180)
    assert run["state"] == "succeeded", run
    data = stack.data_dir
    transcripts = wait_for(
        lambda: [p for p in (data / "terminals").rglob("*") if p.is_file()],
        timeout=30,
        what="a transcript file",
    )
    db, repos = data / "berth.sqlite3", data / "repos"
    for path in (db, data / "secret_key", data / "channel_layer.key", repos, data / "logs"):
        assert path.exists(), path

    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    open_to_others = [
        f"{p.relative_to(data)} {stat.S_IMODE(p.lstat().st_mode):o}"
        for p in [data, *data.rglob("*")]
        if not p.is_symlink() and stat.S_IMODE(p.lstat().st_mode) & 0o077
    ]
    assert open_to_others == []
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    assert stat.S_IMODE(transcripts[0].stat().st_mode) == 0o600
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o700 for p in repos.rglob("*.git"))

    # nobody reaches the folder above (so the refusals are DATA_DIR's) and reads nothing.
    assert as_nobody("test", "-x", str(data.parent)).returncode == 0
    for path in (db, transcripts[0], repos):
        refused = as_nobody("ls", "-l", str(path))
        assert refused.returncode != 0 and "Permission denied" in refused.stderr, path
    assert as_nobody("cat", str(db)).returncode != 0


def test_the_api_still_answers_after_all_this(stack):
    r = stack.api("GET", "/workspaces")
    assert r.status_code == 200 and "shop" in json.dumps(r.json())
