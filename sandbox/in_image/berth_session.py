#!/usr/bin/python3 -IS
"""berth-session: the exec channel inside a session's sandbox (docs/sessions.md).

Baked into the sandbox image (sandbox/images.py) and run as the session container's
command, as the sandbox user. It listens on 127.0.0.1:61001 inside the sandbox's own
network namespace, which only the runner agent of its host can enter (sandbox/netns.py),
and starts each exec it is asked for as `sh -c command` in a process group of its own.

Docker keeps no output for `docker exec` and cannot re-attach one, so execs are not
Docker's: their output and their end go to this process's stdout as frames, one per
line, which the engine keeps as the container's log and the agent follows (and resumes
after a restart, from its last timestamp) like a run's:

    \\x1e<exec id> O <seq> <mac> <base64 of whole stdout lines, each ending in \\n>
    \\x1e<exec id> E <seq> <mac> <base64 of whole stderr lines, each ending in \\n>
    \\x1e<exec id> o <seq> <mac> <base64 of a piece of a stdout line>
    \\x1e<exec id> e <seq> <mac> <base64 of a piece of a stderr line>
    \\x1e<exec id> x <seq> <mac> <JSON of its end: exit_code, signal, reason, oom>

`seq` counts an exec's frames from 1 and `mac` is an HMAC-SHA256 (first 16 bytes, in
base64) of "<exec id> <kind> <seq> " and the data, under a key the agent hands over
with the exec and this process keeps in memory only. Under gVisor a process of the
sandbox user can write to this process's stdout through /proc/1/fd/1, but can read
neither that stdout nor this process's memory: a line it writes is no exec's frame
(docs/security.md, 18). An exec asked for without a key (an older agent)
is framed without seq and mac.

Only the runner agent is served, though every process of the sandbox reaches the port:
the agent hands this process a key at its first ping (nothing else runs here yet), once;
from then on each connection proves the key both ways (`handshake`), this side first,
before any request is served (docs/security.md, 32). This process's own lines are then
frames under OWN_ID, signed with that key, so they still reach the session run's log,
where lines nobody signed are dropped (docs/security.md, 26).

Terminals (berth_pty.py beside it) are shells on pseudo-terminals held here, so a
viewer that goes away loses nothing: `pty_attach` turns a connection into a terminal's
stream, replaying what the viewer missed.

Files (berth_files.py beside it): `apply` brings files to the branch's version only
where they still hold the version the host thinks is there (a compare-and-swap on
their Git blob ids), and `manifest` and `read` show the host what /workspace holds, so
the host never checks out or reads a session's tree through the volume's host path.

Whole lines go out together, as many as have arrived within CHUNK bytes, in one frame
(O/E: one write, one MAC, one engine log message for a flood of short lines; the agent
splits it back into one log entry per line). A line longer than CHUNK is framed in
pieces of CHUNK bytes (o/e), and a partial line (a prompt) after PARTIAL_S without more.
An exec's output goes through pipes; this process is not dumpable, so under runc an exec
cannot open its /proc/<pid>/fd/1, and it is the container's init itself (no dumpable
docker-init holds the same output).
It runs on Debian's Python 3.11 with the standard library only.
"""

import asyncio
import base64
import contextlib
import ctypes
import hashlib
import hmac
import io
import json
import os
import signal
import sys
from typing import Any

sys.path.insert(0, "/usr/local/lib/berth")  # berth_files.py, baked beside this (-I leaves it out)
import berth_files  # type: ignore[import-not-found]
import berth_pty  # type: ignore[import-not-found]

PORT = 61001
CHUNK = 8192  # base64 of it stays under Docker's 16 KB log message
PARTIAL_S = 0.05
# One request line: an `apply` of one file at the workspace's file cap (10 MB, in
# base64) fits; the host sends larger batches as several requests.
MAX_REQUEST = 16 << 20
KILL_GRACE_S = 5.0
PIPE_GRACE_S = 1.0
REAP_EVERY_S = 1.0
KEEP_ENDED = 1000  # ends remembered for `status`, after their frame was written
# An exec's output is read no faster than this (lines, bytes a second; a second's worth
# at once): past it the command waits on its full pipe, as on a slow terminal, rather
# than the host dropping what it cannot store. Below the host's own budget for the
# sandbox (SANDBOX_LOG_LINES_PER_S, 100,000 by default), which still holds if a
# process writes past this one.
PACE_LINES = 90_000
PACE_BYTES = 14 << 20
OUT = sys.stdout.buffer
PR_SET_DUMPABLE = 4


class Pace:
    """What an exec's output may still owe: read lines and bytes beyond a second's worth
    at PACE_LINES and PACE_BYTES are waited off before the next read (its two pipes
    together)."""

    def __init__(self) -> None:
        self.lines = self.bytes = 0.0
        self.at = 0.0

    async def spend(self, lines: int, size: int) -> None:
        now = asyncio.get_running_loop().time()
        gone, self.at = now - self.at, now
        self.lines = max(0.0, self.lines - gone * PACE_LINES) + lines
        self.bytes = max(0.0, self.bytes - gone * PACE_BYTES) + size
        wait = max(self.lines / PACE_LINES, self.bytes / PACE_BYTES) - 1.0
        if wait > 0:
            await asyncio.sleep(wait)


class Signer:
    """Frames under one id and key, numbered from 1."""

    def __init__(self, frame_id: str, key: bytes) -> None:
        self.id, self.key = frame_id, key
        self.seq = 0  # frames written so far


class Exec(Signer):
    def __init__(self, exec_id: str, proc: asyncio.subprocess.Process, key: bytes) -> None:
        super().__init__(exec_id, key)
        self.proc = proc
        self.pace = Pace()
        self.reason = ""  # set when this process ends it: timeout, killed, session_stopped
        self.end: dict[str, Any] | None = None
        self.carrier: asyncio.Future[None] | None = None


# The channel's key (docs/security.md, 32). The runner agent hands it once, at its
# first ping after the container started, when no other process runs here yet (setup
# has a container of its own; execs and terminals come after ready), and never again.
# From then on each connection proves it both ways before anything is served: this
# process first (the agent sends nothing to a channel that cannot), then the agent in
# its request. The channel's own lines are then frames under OWN_ID, signed with it.
NONCE_BYTES = 16
OWN_ID = "_"  # no exec's id: those are alphanumeric
KEY: list[Signer] = []  # the channel's own Signer, once keyed


def proof(key: bytes, side: bytes, *nonces: str) -> str:
    """`side` (b"channel" or b"agent") keeps one side's proof from passing as the other's."""
    return hmac.new(key, side + b" " + " ".join(nonces).encode(), hashlib.sha256).hexdigest()


class SignedLines(io.TextIOBase):
    """This process's stderr once keyed: each line one frame under OWN_ID, so its own
    lines (a crash's traceback too) still reach the session run's log, where lines
    nobody signed are dropped from then on."""

    def __init__(self, signer: Signer) -> None:
        self.signer, self.buf = signer, ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        *lines, self.buf = (self.buf + text).split("\n")
        for line in lines:
            data = line.encode(errors="replace")
            for at in range(0, max(len(data), 1), CHUNK):
                frame(self.signer, b"e", base64.b64encode(data[at : at + CHUNK]))
        return len(text)

    def flush(self) -> None:
        if self.buf:
            self.write("\n")


def keyed(key: bytes) -> None:
    signer = Signer(OWN_ID, key)
    KEY.append(signer)
    sys.stderr = SignedLines(signer)
    sys.stderr.write("[berth] the exec channel is keyed: it serves only the runner agent\n")


async def _line(reader: asyncio.StreamReader) -> dict[str, Any]:
    found = json.loads(await reader.readline() or b"null")
    if not isinstance(found, dict):
        raise ValueError("not a request")
    return found


def _say(writer: asyncio.StreamWriter, line: dict[str, Any]) -> None:
    writer.write(json.dumps(line).encode() + b"\n")


async def handshake(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> str:
    """What the agent's proof in its first request must be; "" when this connection
    serves nothing more (it keyed the channel, or it was refused).

    1. The agent says hello with a fresh nonce.
    2. Not keyed yet: the agent's next line hands the key; the answer proves it got it.
    3. Keyed: the answer carries this side's nonce and its proof over both nonces; the
       agent's first request must carry its own proof over both (checked in `serve`)."""
    hello = await _line(reader)
    theirs = str(hello.get("nonce") or "")
    if hello.get("op") != "hello" or len(theirs) != 2 * NONCE_BYTES or not theirs.isalnum():
        _say(writer, {"ok": False, "error": "unproven"})
        return ""
    if not KEY:
        _say(writer, {"ok": True, "keyed": False})
        given = await _line(reader)
        key = bytes.fromhex(str(given.get("key") or ""))
        if given.get("op") != "key" or len(key) != 32 or KEY:
            _say(writer, {"ok": False, "error": "unproven"})
            return ""
        keyed(key)
        _say(writer, {"ok": True, "keyed": True, "proof": proof(key, b"channel", theirs)})
        return ""
    ours = os.urandom(NONCE_BYTES).hex()
    mine = proof(KEY[0].key, b"channel", theirs, ours)
    _say(writer, {"ok": True, "keyed": True, "nonce": ours, "proof": mine})
    return proof(KEY[0].key, b"agent", theirs, ours)


FILE_OPS = {"apply": berth_files.apply, "manifest": berth_files.manifest, "read": berth_files.read}
EXECS: dict[str, Exec] = {}
ENDED: dict[str, dict[str, Any]] = {}


def frame(run: Signer, kind: bytes, data: bytes) -> None:
    head = run.id.encode() + b" " + kind + b" "
    if run.key:
        run.seq += 1
        head += str(run.seq).encode() + b" "
        mac = hmac.new(run.key, head + data, hashlib.sha256).digest()[:16]
        head += base64.b64encode(mac) + b" "
    OUT.write(b"\x1e" + head + data + b"\n")
    OUT.flush()


def oom_kills() -> int | None:
    """The cgroup's count of OOM kills (v1 under runc here, v2 elsewhere; gVisor has none)."""
    for path, key in (
        ("/sys/fs/cgroup/memory/memory.oom_control", "oom_kill"),
        ("/sys/fs/cgroup/memory.events", "oom_kill"),
    ):
        with contextlib.suppress(OSError, ValueError), open(path) as f:
            for line in f:
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
    return None


def first_to_go() -> None:
    """In the child: its processes go before the channel when memory runs out."""
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as f:
        f.write("1000")


async def pump(run: Exec, reader: asyncio.StreamReader, kind: bytes) -> None:
    lines_kind = kind.upper()  # whole lines: o -> O, e -> E
    buf = b""
    while True:
        try:
            if buf:
                chunk = await asyncio.wait_for(reader.read(CHUNK), PARTIAL_S)
            else:
                chunk = await reader.read(CHUNK)
        except TimeoutError:
            frame(run, kind, base64.b64encode(buf))
            buf = b""
            continue
        if not chunk:
            break
        await run.pace.spend(chunk.count(b"\n"), len(chunk))
        buf += chunk
        while True:
            end = buf.rfind(b"\n", 0, CHUNK)  # the whole lines of the next CHUNK bytes
            if end >= 0:
                frame(run, lines_kind, base64.b64encode(buf[: end + 1]))
                buf = buf[end + 1 :]
            elif len(buf) >= CHUNK:
                frame(run, kind, base64.b64encode(buf[:CHUNK]))
                buf = buf[CHUNK:]
            else:
                break
    if buf:
        frame(run, kind, base64.b64encode(buf))


async def carry(run: Exec, timeout_s: float, oom_before: int | None) -> None:
    """Its output to the end, then its end frame."""
    assert run.proc.stdout is not None and run.proc.stderr is not None
    timer = asyncio.ensure_future(deadline(run, timeout_s)) if timeout_s > 0 else None
    pumps = asyncio.gather(pump(run, run.proc.stdout, b"o"), pump(run, run.proc.stderr, b"e"))
    code = await run.proc.wait()
    if timer is not None:
        timer.cancel()
    # The group's other processes (a shell's background job) go with it: a process that
    # lives on between turns is a detached exec of its own.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(run.proc.pid, signal.SIGKILL)
    # What is left in the pipes, unless a process that left the group holds them open.
    try:
        await asyncio.wait_for(asyncio.shield(pumps), PIPE_GRACE_S)
    except TimeoutError:
        pumps.cancel()
    after = oom_kills()
    sig = -code if code < 0 else None
    oom = None if after is None or oom_before is None else after > oom_before
    # Killed by the kernel: its own SIGKILL, or a shell's 128+9 for the command it ran.
    killed = sig == signal.SIGKILL or code == 128 + signal.SIGKILL
    reason = run.reason or ("oom_killed" if oom and killed else "")
    end = {"exit_code": code if code >= 0 else None, "signal": sig, "reason": reason, "oom": oom}
    frame(run, b"x", json.dumps(end).encode())
    run.end = end
    EXECS.pop(run.id, None)
    ENDED[run.id] = end
    while len(ENDED) > KEEP_ENDED:
        ENDED.pop(next(iter(ENDED)))


async def deadline(run: Exec, timeout_s: float) -> None:
    await asyncio.sleep(timeout_s)
    stop(run, "timeout")


def stop(run: Exec, reason: str, sig: int = signal.SIGTERM) -> None:
    """SIGTERM to its group, SIGKILL after the grace period."""
    run.reason = run.reason or reason
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(run.proc.pid, sig)
    if sig != signal.SIGKILL:
        asyncio.get_running_loop().call_later(KILL_GRACE_S, kill_if_running, run, reason)


def kill_if_running(run: Exec, reason: str) -> None:
    if run.end is None:
        stop(run, reason, signal.SIGKILL)


async def start(request: dict[str, Any]) -> dict[str, Any]:
    exec_id = str(request["id"])
    if not exec_id.isalnum() or exec_id in EXECS or exec_id in ENDED:
        return {"ok": False, "error": "id_taken"}
    env = {**os.environ, **{str(k): str(v) for k, v in (request.get("env") or {}).items()}}
    key = bytes.fromhex(str(request.get("key") or ""))
    oom_before = oom_kills()
    with berth_pty.spawning():  # recorded in EXECS before the reaper looks again
        try:
            proc = await asyncio.create_subprocess_exec(
                "sh",
                "-c",
                str(request["command"]),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=str(request.get("cwd") or "/workspace"),
                env=env,
                start_new_session=True,
                preexec_fn=first_to_go,
            )
        except OSError as e:
            return {"ok": False, "error": "start_failed", "detail": str(e)}
        run = EXECS[exec_id] = Exec(exec_id, proc, key)
    run.carrier = asyncio.ensure_future(
        carry(run, float(request.get("timeout_s") or 0), oom_before)
    )
    return {"ok": True, "pid": proc.pid}


async def answer(request: dict[str, Any]) -> dict[str, Any]:
    op = request.get("op")
    if op == "exec":
        return await start(request)
    if op == "kill":
        run = EXECS.get(str(request.get("id")))
        if run is None:
            return {"ok": False, "error": "not_running"}
        stop(run, "killed", signal.SIGKILL if request.get("force") else signal.SIGTERM)
        return {"ok": True}
    if op == "status":
        ids = [str(i) for i in request.get("ids") or []]
        return {
            "ok": True,
            "running": sorted(i for i in ids if i in EXECS),
            "ended": {i: ENDED[i] for i in ids if i in ENDED},
        }
    if op == "ping":
        # How many, never which: an exec id is the agent's to hand out.
        return {"ok": True, "running": len(EXECS)}
    if op in ("pty_close", "pty_list"):
        closed: dict[str, Any] = (
            await berth_pty.close(request) if op == "pty_close" else berth_pty.listing()
        )
        return closed
    if op in FILE_OPS:
        # On a thread: hashing and writing files must not hold up the execs' output.
        return await asyncio.to_thread(FILE_OPS[op], request)
    return {"ok": False, "error": "unknown_op"}


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        try:
            expected = await handshake(reader, writer)
        except (ValueError, TypeError):
            expected = ""
        proven = False
        while expected and (line := await reader.readline()):
            try:
                request = json.loads(line)
                if not proven:
                    # Nothing is served to a peer that cannot prove the key: no
                    # terminal, no scrollback, no keystroke, no exec, no file.
                    if not isinstance(request, dict) or not hmac.compare_digest(
                        str(request.get("proof") or ""), expected
                    ):
                        _say(writer, {"ok": False, "error": "unproven"})
                        break
                    proven = True
                if isinstance(request, dict) and request.get("op") == "pty_attach":
                    # The connection becomes the terminal's stream (berth_pty.py).
                    await berth_pty.attach(request, reader, writer)
                    return
                reply = await answer(request)
            except (ValueError, KeyError, TypeError, OSError) as e:
                reply = {"ok": False, "error": "bad_request", "detail": str(e)}
            writer.write(json.dumps(reply).encode() + b"\n")
            await writer.drain()
    except (ConnectionError, ValueError, asyncio.LimitOverrunError):
        pass
    finally:
        writer.close()


async def reap_orphans() -> None:
    """As the container's init (pid 1), orphans become this process's children: their
    zombies are reaped here, never an exec's own (asyncio's watcher waits for those),
    nor one whose start is under way (its pid is not recorded yet)."""
    while True:
        await asyncio.sleep(REAP_EVERY_S)
        if berth_pty.SPAWNING[0]:
            continue  # the orphans wait a pass
        own = {run.proc.pid for run in EXECS.values()} | berth_pty.pids()
        while True:
            try:
                found = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                break
            if found is None or found.si_pid in own:
                break
            with contextlib.suppress(ChildProcessError):
                os.waitpid(found.si_pid, os.WNOHANG)


async def main() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    reaper = asyncio.ensure_future(reap_orphans())
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    server = await asyncio.start_server(serve, "127.0.0.1", PORT, limit=MAX_REQUEST)
    sys.stderr.write(f"[berth] session ready: the exec channel listens on port {PORT}\n")
    sys.stderr.flush()
    await stopping.wait()
    server.close()
    # A stop: each exec is ended (its end frame says so) before the channel goes.
    running = list(EXECS.values())
    for run in running:
        stop(run, "session_stopped")
    terminals = asyncio.ensure_future(berth_pty.close_all())
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.gather(*(r.proc.wait() for r in running)), KILL_GRACE_S + 1)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(terminals, KILL_GRACE_S)
    await asyncio.sleep(PARTIAL_S * 2)  # their last frames written
    reaper.cancel()


if __name__ == "__main__":
    asyncio.run(main())
