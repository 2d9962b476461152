"""berth-session's terminals (imported by berth_session.py; docs/sessions.md, "Terminals").

A terminal is a shell on a pseudo-terminal, held here, inside the sandbox, by the
session's own init: not by the runner agent, not by daphne. So a viewer that goes away
(a page reload, a network blip, a daphne or agent restart) loses nothing: the next
attach replays what it missed from the output kept here and carries on (dtach's idea).

- `pty_attach` {id, after, cols, rows, create}: the terminal `id` (started first if
  there is none and `create`: `bash -l` as the sandbox user, in /workspace), then
  this connection becomes the terminal's stream. The first answer line is
  {"ok", "start", "end", "exit"}; then lines {"o": <base64>, "at": <offset>} with its
  output from `after` on (what is still kept: at most KEEP bytes back), and
  {"x": <exit code>, "why": <"", closed or session_stopped>} when its shell ended.
  The other way, lines {"i": <base64 input>} and {"r": [cols, rows]}.
- `pty_close` {id}: its shell's process group is hung up, then killed.
- `pty_list`: the terminals, each with its end offset and exit code.

Offsets count the terminal's output bytes from its start, so a viewer that saw up to N
asks for `after` = N. A viewer that falls more than WATCHER_MAX bytes behind is cut
off (its connection closed) and attaches again: a slow viewer costs bounded memory.
"""

import asyncio
import base64
import contextlib
import fcntl
import json
import os
import signal
import struct
import termios
from collections.abc import Iterator
from typing import Any

KEEP = 256 << 10  # recent output kept per terminal, for a viewer attaching again
WATCHER_MAX = 1 << 20  # output queued for one viewer before it is cut off
MAX_TERMINALS = 8
READ = 1 << 16
HANGUP_GRACE_S = 2.0
SHELLS = ("/bin/bash", "/bin/sh")


class Terminal:
    def __init__(self, tid: str, proc: asyncio.subprocess.Process, master: int) -> None:
        self.id, self.proc, self.master = tid, proc, master
        self.kept = bytearray()
        self.base = 0  # the offset of kept[0] in the terminal's whole output
        self.watchers: set[Watcher] = set()
        self.exit: int | None = None
        self.why = ""  # who ended it, when not its shell: closed, session_stopped
        self.ended = asyncio.Event()
        self.waiter: asyncio.Future[None] | None = None  # its end, awaited

    @property
    def end(self) -> int:
        return self.base + len(self.kept)

    def output(self, data: bytes) -> None:
        at = self.end
        self.kept += data
        if len(self.kept) > KEEP:
            drop = len(self.kept) - KEEP
            del self.kept[:drop]
            self.base += drop
        for watcher in list(self.watchers):
            watcher.put({"o": base64.b64encode(data).decode(), "at": at}, len(data))

    def since(self, after: int) -> tuple[int, bytes]:
        at = min(max(after, self.base), self.end)
        return at, bytes(self.kept[at - self.base :])


class Watcher:
    """One viewer's connection: what it has yet to be sent, bounded."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.size = 0
        self.cut = False

    def put(self, line: dict[str, Any] | None, size: int = 0) -> None:
        if self.cut:
            return
        self.size += size
        if self.size > WATCHER_MAX:
            self.cut = True
            self.queue.put_nowait(None)  # it attaches again, from where it got to
            return
        self.queue.put_nowait(line)


TERMINALS: dict[str, Terminal] = {}


def pids() -> set[int]:
    """The terminals' shells: the init's orphan reaper leaves their ends to asyncio."""
    return {t.proc.pid for t in TERMINALS.values() if t.exit is None}


# Children forked whose pid is not yet recorded (in TERMINALS, or berth_session's
# EXECS): the orphan reaper waits while there are any. A child that exits at once is a
# zombie in between; reaped there as an orphan, asyncio would find it gone and report
# its exit as 255 (seen: an `echo hi` exec ending exit_nonzero under load).
SPAWNING = [0]


@contextlib.contextmanager
def spawning() -> Iterator[None]:
    SPAWNING[0] += 1
    try:
        yield
    finally:
        SPAWNING[0] -= 1


def _controlling_tty() -> None:
    """In the child, before the shell: the terminal is its controlling tty (job control,
    ^C), and it goes before the channel when memory runs out."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as f:
        f.write("1000")


def _size(fd: int, cols: int, rows: int) -> None:
    cols, rows = max(2, min(int(cols), 1000)), max(2, min(int(rows), 1000))
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


async def _start(tid: str, cols: int, rows: int) -> Terminal:
    master, slave = os.openpty()
    with spawning():
        try:
            _size(slave, cols, rows)
            shell = next((s for s in SHELLS if os.path.exists(s)), "/bin/sh")
            env = {**os.environ, "TERM": "xterm-256color", "COLORTERM": "truecolor"}
            proc = await asyncio.create_subprocess_exec(
                shell,
                "-l",
                stdin=slave,
                stdout=slave,
                stderr=slave,
                cwd="/workspace",
                env=env,
                start_new_session=True,
                preexec_fn=_controlling_tty,
            )
        except BaseException:
            os.close(master)
            raise
        finally:
            os.close(slave)
        term = TERMINALS[tid] = Terminal(tid, proc, master)
    os.set_blocking(master, False)
    loop = asyncio.get_running_loop()
    loop.add_reader(master, _readable, term)
    term.waiter = asyncio.ensure_future(_wait(term))
    return term


def _forget_ended() -> None:
    """Ended terminals nobody watches are kept for a late viewer, up to a bound."""
    ended = [t for t in TERMINALS.values() if t.exit is not None and not t.watchers]
    for term in ended[: max(0, len(TERMINALS) - 2 * MAX_TERMINALS + 1)]:
        asyncio.get_running_loop().remove_reader(term.master)
        os.close(term.master)
        del TERMINALS[term.id]


def _readable(term: Terminal) -> None:
    try:
        data = os.read(term.master, READ)
    except BlockingIOError:
        return
    except OSError:
        data = b""  # EIO: every process holding the terminal has gone
    if data:
        term.output(data)
    else:
        asyncio.get_running_loop().remove_reader(term.master)


async def _wait(term: Terminal) -> None:
    term.exit = await term.proc.wait()
    # What the shell wrote last is read before its end is said.
    with contextlib.suppress(OSError):
        while data := os.read(term.master, READ):
            term.output(data)
    term.ended.set()
    for watcher in list(term.watchers):
        watcher.put({"x": term.exit, "why": term.why})


def _write(fd: int, data: bytes) -> None:
    """Input into the terminal; a full terminal buffer (the shell not reading) drops
    the rest rather than blocking every other terminal and exec."""
    with contextlib.suppress(BlockingIOError, OSError):
        while data:
            data = data[os.write(fd, data) :]


async def attach(
    request: dict[str, Any], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    tid = str(request.get("id") or "")
    if not tid.isalnum() or len(tid) > 40:
        return _answer(writer, {"ok": False, "error": "bad_request", "detail": "id"})
    term = TERMINALS.get(tid)
    if term is None and not request.get("create", True):
        return _answer(writer, {"ok": False, "error": "no_terminal"})
    if term is None:
        if sum(1 for t in TERMINALS.values() if t.exit is None) >= MAX_TERMINALS:
            return _answer(writer, {"ok": False, "error": "too_many_terminals"})
        _forget_ended()
        try:
            term = await _start(tid, request.get("cols") or 80, request.get("rows") or 24)
        except (OSError, RuntimeError) as e:  # RuntimeError: no thread for its watcher
            return _answer(writer, {"ok": False, "error": "start_failed", "detail": str(e)})
    elif request.get("cols") and request.get("rows") and term.exit is None:
        with contextlib.suppress(OSError, ValueError):
            _size(term.master, request["cols"], request["rows"])
    watcher = Watcher()
    at, missed = term.since(int(request.get("after") or 0))
    _answer(writer, {"ok": True, "start": term.base, "end": term.end, "exit": term.exit})
    if missed:
        watcher.put({"o": base64.b64encode(missed).decode(), "at": at}, len(missed))
    if term.exit is not None:
        watcher.put({"x": term.exit, "why": term.why})
    term.watchers.add(watcher)
    sending = asyncio.ensure_future(_send(watcher, writer))
    try:
        await _receive(term, reader, sending)
    finally:
        term.watchers.discard(watcher)
        sending.cancel()
        with contextlib.suppress(Exception):
            writer.close()


def _answer(writer: asyncio.StreamWriter, line: dict[str, Any]) -> None:
    writer.write(json.dumps(line).encode() + b"\n")


async def _send(watcher: Watcher, writer: asyncio.StreamWriter) -> None:
    while (line := await watcher.queue.get()) is not None:
        size = len(line.get("o") or "") * 3 // 4
        _answer(writer, line)
        await writer.drain()
        watcher.size -= size
    writer.close()


async def _receive(
    term: Terminal, reader: asyncio.StreamReader, sending: "asyncio.Future[None]"
) -> None:
    reading: asyncio.Future[bytes] = asyncio.ensure_future(reader.readline())
    try:
        while True:
            either: set[asyncio.Future[Any]] = {reading, sending}
            done, _ = await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            if sending in done:
                return
            line = reading.result()
            if not line:
                return
            reading = asyncio.ensure_future(reader.readline())
            try:
                message = json.loads(line)
                if term.exit is not None:
                    continue
                if "i" in message:
                    _write(term.master, base64.b64decode(str(message["i"])))
                if "r" in message:
                    _size(term.master, *message["r"][:2])
            except (ValueError, TypeError, OSError):
                continue  # a bad line from the agent is dropped, never the stream
    finally:
        reading.cancel()


async def close(request: dict[str, Any]) -> dict[str, Any]:
    term = TERMINALS.get(str(request.get("id") or ""))
    if term is None:
        return {"ok": False, "error": "no_terminal"}
    await _hang_up(term, "closed")
    return {"ok": True, "exit": term.exit}


async def _hang_up(term: Terminal, why: str) -> None:
    if term.exit is None:
        term.why = why
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(term.proc.pid, signal.SIGHUP)
        try:
            await asyncio.wait_for(term.ended.wait(), HANGUP_GRACE_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(term.proc.pid, signal.SIGKILL)
            await term.ended.wait()


def listing() -> dict[str, Any]:
    return {
        "ok": True,
        "terminals": {t.id: {"end": t.end, "exit": t.exit} for t in TERMINALS.values()},
    }


async def close_all() -> None:
    await asyncio.gather(*(_hang_up(t, "session_stopped") for t in list(TERMINALS.values())))
