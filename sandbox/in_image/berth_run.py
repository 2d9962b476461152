#!/usr/bin/python3 -IS
"""The output wrapper of a run's command (and of a setup step, a build, a preview's or a
release's process): `berth-run <argv...>` runs argv with its stdout and stderr on pipes
of its own and writes what they carry to its stdout as frames:

    \\x1e<kind> <base64 data>\\n

Kinds: O/E whole stdout/stderr lines (several, each ending in a newline: one frame per
read of a flood), o/e a piece of a line longer than CHUNK or the last one, unended, at
the end; x (no data) the end: nothing of the command follows, so the agent need not
wait for the engine to close the log stream, nor ask it again. The runner agent splits
frames back into one log entry per line (logs/follow.py), as it would have split the
engine's own messages.

Why: the engine writes its log file one message per line. `yes ''` at a sandbox's one
cpu had dockerd spend more than a core writing 200,000 JSON lines a second, which every
other team's sandbox on the host then waited for. Framed, a flood is a dozen messages a
second. And the output is read no faster than PACE_LINES and PACE_BYTES a second:
past that the command waits on its full pipe, as it would on a slow terminal, rather
than the host dropping what it cannot store (the exec channel does the same for a
session's execs, sandbox/in_image/berth_session.py).

A line is held until its newline, CHUNK bytes, or the end, as the engine holds one. The
exit status is the command's (128 + the signal's number if a signal ended it, as the
image's init reports it), and the signals the init forwards reach the command. Only
modules built into the interpreter are imported: it starts in a few milliseconds.
"""

import binascii
import os
import select
import signal
import sys
import time

CHUNK = 8192  # base64 of it stays under the engine's 16 KB log message
# Below the agent's own budget for a sandbox (SANDBOX_LOG_LINES_PER_S, 100,000 by
# default), which still holds for a process that writes to this one's stdout itself.
PACE_LINES = 90_000
PACE_BYTES = 14 << 20
FORWARDED = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
EXIT_NOT_FOUND = 127


def write_all(data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(1, view) :]


def frame(kind: bytes, data: bytes) -> None:
    write_all(b"\x1e" + kind + b" " + binascii.b2a_base64(data, newline=False) + b"\n")


class Pace:
    """Lines and bytes read beyond a second's worth at the pace are waited off before
    the next read (both pipes together)."""

    def __init__(self) -> None:
        self.lines = self.bytes = 0.0
        self.at = time.monotonic()

    def spend(self, lines: int, size: int) -> None:
        now = time.monotonic()
        gone, self.at = now - self.at, now
        self.lines = max(0.0, self.lines - gone * PACE_LINES) + lines
        self.bytes = max(0.0, self.bytes - gone * PACE_BYTES) + size
        wait = max(self.lines / PACE_LINES, self.bytes / PACE_BYTES) - 1.0
        if wait > 0:
            time.sleep(wait)


class Stream:
    def __init__(self, fd: int, kind: bytes) -> None:
        self.fd, self.piece, self.lines = fd, kind, kind.upper()
        self.buf = b""

    def take(self, chunk: bytes) -> None:
        """Whole lines out, CHUNK bytes a frame at most; a line past CHUNK in pieces."""
        buf = self.buf + chunk if self.buf else chunk
        while True:
            end = buf.rfind(b"\n", 0, CHUNK)
            if end >= 0:
                frame(self.lines, buf[: end + 1])
                buf = buf[end + 1 :]
            elif len(buf) >= CHUNK:
                frame(self.piece, buf[:CHUNK])
                buf = buf[CHUNK:]
            else:
                break
        self.buf = buf

    def end(self) -> None:
        if self.buf:
            frame(self.piece, self.buf)
            self.buf = b""


def spawn(argv: list[str], out: int, err: int) -> int:
    pid = os.fork()
    if pid:
        return pid
    try:
        # The interpreter ignores these; the command gets the defaults a shell gives
        # (`yes | head` ends quietly by SIGPIPE).
        for number in (signal.SIGPIPE, signal.SIGXFSZ, *FORWARDED, signal.SIGCHLD):
            signal.signal(number, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        # Its processes go before this one when memory runs out.
        try:
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("1000")
        except OSError:
            pass
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.execvp(argv[0], argv)  # noqa: S606 (argv is `sh -c <the command>`, as before)
    except OSError as e:
        os.write(2, b"berth-run: %s: %s\n" % (argv[0].encode(), (e.strerror or str(e)).encode()))
    os._exit(EXIT_NOT_FOUND)


def main() -> int:
    argv = sys.argv[1:]
    if not argv:
        sys.stderr.write("usage: berth-run command [arg...]\n")
        return 2
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    # A child's end wakes the poll below even while a process it left holds the pipes.
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    child = 0
    pending: list[int] = []

    def forward(number: int, _frame: object) -> None:
        if child:
            # No contextlib: every import costs this wrapper's start.
            try:  # noqa: SIM105
                os.kill(child, number)
            except ProcessLookupError:
                pass  # reaped already
        else:
            pending.append(number)

    for number in FORWARDED:
        signal.signal(number, forward)
    child = spawn(argv, out_w, err_w)
    for early in pending:
        os.kill(child, early)
    os.close(out_w)
    os.close(err_w)
    streams = {out_r: Stream(out_r, b"o"), err_r: Stream(err_r, b"e")}
    poll = select.poll()
    for fd in (out_r, err_r, wake_r):
        poll.register(fd, select.POLLIN)
    pace = Pace()
    status = None
    while streams:
        for fd, _ in poll.poll():
            if fd == wake_r:
                while True:
                    try:
                        if not os.read(wake_r, 512):
                            break
                    except BlockingIOError:
                        break
                continue
            stream = streams.get(fd)
            if stream is None:
                continue
            chunk = os.read(fd, CHUNK)
            if not chunk:
                stream.end()
                poll.unregister(fd)
                del streams[fd]
                continue
            pace.spend(chunk.count(b"\n"), len(chunk))
            stream.take(chunk)
        if status is None:
            done, status = os.waitpid(child, os.WNOHANG)
            if not done:
                status = None
            elif streams:
                # Ended, while something it started holds the pipes: what they hold now
                # goes out; what such a process writes later would have gone with the
                # container, which ends with the command.
                drain(streams)
                break
    if status is None:
        status = os.waitpid(child, 0)[1]
    frame(b"x", b"")
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.waitstatus_to_exitcode(status)


def drain(streams: dict[int, Stream]) -> None:
    """What the pipes hold now (a pipe holds 64 KB: a process still writing fast is
    not followed for ever)."""
    for fd, stream in streams.items():
        os.set_blocking(fd, False)
        for _ in range(64):
            try:
                chunk = os.read(fd, CHUNK)
            except BlockingIOError:
                break
            if not chunk:
                break
            stream.take(chunk)
        stream.end()


if __name__ == "__main__":
    sys.exit(main())
