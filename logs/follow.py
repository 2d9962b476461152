"""Following one container's output into its log on the web host, on a thread of its own.

Docker's logs endpoint is read raw, so each frame keeps its stream (stdout/stderr) and
its timestamp; entries go to the web host in batches (logs.shipped). After an agent
restart the follower resumes after the last timestamp the web host stored: nothing
twice, nothing missed (the engine keeps the container's output
until the container is removed, which only happens after the log is complete).
"""

import asyncio
import base64
import binascii
import calendar
import functools
import logging
import struct
import threading
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import docker
from django.conf import settings

from logs import logstore
from logs.shipped import ShippedLog, run_log
from sandbox.engine import engine

log = logging.getLogger("berth.runner_agent")

SIGNAL_EVERY_S = 0.05  # coalesce "new entries" signals: readers catch up from storage


def ts_ns(ts: bytes | str) -> int:
    """Nanoseconds since the epoch of Docker's RFC 3339 timestamp (trailing zeros of the
    fraction are trimmed by Docker, so strings do not compare)."""
    text = ts.decode() if isinstance(ts, bytes) else ts
    date, _, frac = text.rstrip("Z").partition(".")
    return _epoch_s(date) * 1_000_000_000 + int((frac + "000000000")[:9] or 0)


@functools.lru_cache(maxsize=256)
def _epoch_s(date: str) -> int:
    # strptime is most of a line's cost; a flood's lines share their second.
    return calendar.timegm(time.strptime(date, "%Y-%m-%dT%H:%M:%S"))


class Budget:
    """One sandbox's share of the agent: lines and bytes a second (settings
    SANDBOX_LOG_LINES_PER_S, SANDBOX_LOG_MB_PER_S), a token bucket holding one second's
    worth. A burst is stored whole, in big batches (one write and one signal per block
    read, not per line); past the bucket, lines are dropped and counted.

    Its clock is the engine's timestamps of the output, not the agent's: what the
    sandbox wrote in a second is what counts. An agent that fell behind (the web host
    slow to take a batch, a restart) reads a backlog faster than it was written, and
    must not drop what the sandbox wrote within its budget."""

    def __init__(self, lines_per_s: int, bytes_per_s: int) -> None:
        self.rate_lines, self.rate_bytes = float(lines_per_s), float(bytes_per_s)
        self.lines, self.bytes = self.rate_lines, self.rate_bytes
        self.at: float | None = None  # the engine time (s) credited up to

    def refill(self, now: float) -> None:
        """Credit up to engine time `now` (once per block read: a flood's lines are not
        timed one by one)."""
        if self.at is None or now <= self.at:
            self.at = now if self.at is None else self.at
            return
        elapsed, self.at = now - self.at, now
        self.lines = min(self.rate_lines, self.lines + elapsed * self.rate_lines)
        self.bytes = min(self.rate_bytes, self.bytes + elapsed * self.rate_bytes)

    def take(self, lines: int, size: int) -> int:
        """How many of `lines` lines (`size` bytes together) fit; those are taken."""
        if lines <= self.lines and size <= self.bytes:
            self.lines -= lines
            self.bytes -= size
            return lines
        fit = min(lines, int(self.lines), int(lines * self.bytes / size) if size else lines)
        fit = max(fit, 0)
        self.lines -= fit
        self.bytes -= size * fit / lines
        return fit


def dropped(writer: logstore.LogWriter, lines: int, ts: str) -> None:
    """`lines` lines of this log dropped over the budget: counted, said later."""
    if not writer.dropped:
        writer.dropped_at = time.monotonic()
    writer.dropped += lines
    writer.dropped_ts = ts


def say_dropped(writer: logstore.LogWriter) -> None:
    """The count of lines dropped since the last note, as a system line of the log.
    It carries the last dropped line's timestamp: after an agent restart, following
    resumes past them, so they are neither stored nor counted twice."""
    if writer.dropped:
        text = f"{writer.dropped} lines dropped: output over the budget of {_limits()}"
        writer.append("system", text.encode(), writer.dropped_ts)
        writer.dropped = 0


def _limits() -> str:
    return (
        f"{settings.SANDBOX_LOG_LINES_PER_S:,} lines/s and "
        f"{settings.SANDBOX_LOG_BYTES_PER_S // (1024 * 1024)} MB/s a sandbox"
    )


NOTE_EVERY_S = 1.0  # during a flood past the budget, its count is said this often

# The image's output wrapper (sandbox/in_image/berth_run.py) writes `\x1e<kind> <base64>`:
# O/E whole stdout/stderr lines, o/e a piece of one.
MARK = b"\x1e"
FRAMED = {b"O": ("stdout", True), b"E": ("stderr", True)}
FRAMED |= {b"o": ("stdout", False), b"e": ("stderr", False)}


def append_lines(
    writer: logstore.LogWriter, budget: Budget, stream: str, text: bytes, whole: bool, ts: str
) -> None:
    """A frame's output into a log, one entry a line (whole lines end in a newline; a
    piece is one entry), as many as the sandbox's budget takes; the rest counted."""
    count = (text.count(b"\n") + (not text.endswith(b"\n"))) if whole else 1
    fit = budget.take(count, len(text))
    if not fit:  # a flood past the budget: counted, never split
        dropped(writer, count, ts)
        return
    lines = text.split(b"\n") if whole else [text]
    if whole and len(lines) > 1 and not lines[-1]:
        lines.pop()  # the newline that ends the last line
    if writer.dropped:
        say_dropped(writer)  # before the first line past the drops: in order
    for line in lines[:fit] if fit < len(lines) else lines:
        writer.append(stream, line, ts)
    if fit < len(lines):
        dropped(writer, len(lines) - fit, ts)


def _blocks(response: Any) -> Iterator[bytes]:
    """The body of Docker's streaming response, in blocks of whatever has arrived.

    Docker sends one HTTP chunk per log message. Reading the buffered socket file with
    `read1` gets everything that has arrived in one call (many chunks in a flood, one
    when quiet, never waiting for more), and the chunking is undone here on that block.
    """
    fp = response.raw._fp.fp  # http.client's buffered socket file, past the headers
    if response.headers.get("Transfer-Encoding", "").lower() != "chunked":
        while block := fp.read1(1 << 16):
            yield block
        return
    buf, left = b"", 0  # left: bytes still due in the current chunk
    while True:
        data = fp.read1(1 << 16)
        if not data:
            return
        buf = buf + data if buf else data
        out, pos, end = [], 0, len(buf)
        while pos < end:
            if left:
                take = min(left, end - pos)
                out.append(buf[pos : pos + take])
                pos += take
                left -= take
                continue
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                break
            if eol == pos:  # the CRLF that ends a chunk's data
                pos += 2
                continue
            size = buf[pos:eol]
            left = int(size.split(b";")[0] if b";" in size else size, 16)
            if left == 0:
                if out:
                    yield b"".join(out)
                return
            pos = eol + 2
        buf = buf[pos:]
        if out:
            yield b"".join(out)


def _frames(blocks: Iterator[bytes]) -> Iterator[tuple[int, bytes] | None]:
    """Whole frames of Docker's multiplexed stream: (1 stdout | 2 stderr, payload), and
    None after each block (everything that has arrived is parsed: a moment to flush).
    Each frame is one log message (a line, or a 16 KB piece of a longer one)."""
    buf, pos = bytearray(), 0
    for block in blocks:
        buf += block
        while len(buf) - pos >= 8:
            stream, size = struct.unpack_from(">BxxxL", buf, pos)
            if len(buf) - pos < 8 + size:
                break
            yield stream, bytes(buf[pos + 8 : pos + 8 + size])
            pos += 8 + size
        del buf[:pos]
        pos = 0
        yield None


class Follower(threading.Thread):
    def __init__(
        self,
        run_id: str,
        container: str,
        loop: asyncio.AbstractEventLoop,
        masker: Callable[[], Any] | None = None,
        framed: bool = False,
    ) -> None:
        """`masker`: called once, when following starts, for what masks each piece of
        output before it is stored (an object with `bytes(data) -> data`). `framed`:
        the command runs behind the image's output wrapper (Sandbox.output_framed)."""
        super().__init__(name=f"follow-{run_id}", daemon=True)
        self.run_id, self.container, self.loop = run_id, container, loop
        self.make_masker = masker
        self.masker: Any = None
        self.framed = framed
        # The wrapper's end frame was read: the log is whole, nothing is read after it.
        self.ended = False
        self.done = threading.Event()
        # The log could not be stored whole (the web host unreachable past the
        # patience): its run is not ended on it, the reconcile follows it again.
        self.failed = False
        self.count = 0
        self.bytes = 0
        self.budget = Budget(settings.SANDBOX_LOG_LINES_PER_S, settings.SANDBOX_LOG_BYTES_PER_S)
        self.seen: bytes = b""  # the engine timestamp of the last frame handled

    def run(self) -> None:
        writer: logstore.LogWriter | None = None
        try:
            writer = self.open_log()
            self._follow(writer)
        except Exception:
            self.failed = True
            log.exception("following %s failed", self.container)
        finally:
            if writer is not None:
                self.failed = not self._close(writer) or self.failed
                self.count, self.bytes = writer.count, writer.total_bytes
            self._signal(self.count)
            self.done.set()

    def open_log(self) -> logstore.LogWriter:
        """The run's log, where the web host has it (logs.shipped)."""
        return ShippedLog(run_log(self.run_id))

    def _close(self, writer: logstore.LogWriter) -> bool:
        """What waits sent, the drops said: the web host unreachable for all of
        SHIP_PATIENCE_S is the one way it is not (said in the agent's log: False)."""
        try:
            say_dropped(writer)
            writer.close()
        except Exception:
            log.exception("the end of %s's log could not be stored", self.run_id)
            return False
        return True

    def _follow(self, writer: logstore.LogWriter) -> None:
        response = self._logs(writer, follow=True)
        if response is None:
            return
        # A quiet command is not a dead connection: no read timeout while following.
        api = engine().api
        api._disable_socket_timeout(api._get_raw_response_socket(response))
        # Asked for only now: the engine takes a while to answer the request above
        # (longer than a short command runs), and nothing is read before this.
        self.masker = self.make_masker() if self.make_masker else None
        writer.batching = True
        self._store(response, writer)
        if self.ended:
            response.close()
            return
        # Docker 20.10's follow stream can end before it has sent a flood's last lines
        # when the container exits (its follow code was rewritten in 23.0): once it
        # ends, whatever the engine kept past the last stored line is read once more.
        catch_up = self._logs(writer, follow=False)
        if catch_up is not None:
            self._store(catch_up, writer)

    def _logs(self, writer: logstore.LogWriter, follow: bool) -> Any:
        """The engine's log stream, from just after the last stored line (None: the
        container is gone)."""
        api = engine().api
        params: dict[str, object] = {
            "follow": int(follow),
            "stdout": 1,
            "stderr": 1,
            "timestamps": 1,
        }
        # Past the last frame handled, stored or dropped (a restart: the last stored).
        last = self.seen.decode() or writer.last_ts
        if last:
            params["since"] = str(Decimal(ts_ns(last)) / Decimal(1_000_000_000))
        try:
            response = api._get(
                api._url("/containers/{0}/logs", self.container), params=params, stream=True
            )
            api._raise_for_status(response)
        except docker.errors.NotFound:
            return None
        return response

    def _store(self, response: Any, writer: logstore.LogWriter) -> None:
        """Each frame to `store_frame`, in order. A stream starts at `since`, which the
        engine applies by the second: its first frames up to the last one handled are
        skipped (the only timestamps parsed)."""
        last = self.seen.decode() or writer.last_ts
        skip_to = ts_ns(last) if last else None
        signalled_at = 0.0
        block_start = True
        for frame in _frames(_blocks(response)):
            if self.ended:
                break
            if frame is not None:
                stream, payload = frame
                ts, _, data = payload.partition(b" ")
                if skip_to is not None:
                    if ts_ns(ts) <= skip_to:
                        continue  # already handled (before a restart, or by the follow stream)
                    skip_to = None
                if block_start:
                    # Credited up to the block's first frame, before any of it is taken:
                    # a line written after a quiet while finds the bucket refilled.
                    self.budget.refill(ts_ns(ts) / 1e9)
                    block_start = False
                self.seen = ts
                self.store_frame(writer, "stderr" if stream == 2 else "stdout", ts.decode(), data)
                if len(writer._pending) < 10_000:
                    continue
            # All that has arrived is parsed (or a big batch is waiting): store it, and
            # tell readers, at most every SIGNAL_EVERY_S.
            writer.flush()
            self.flushed(writer)
            block_start = True
            now = time.monotonic()
            if now - signalled_at >= SIGNAL_EVERY_S:
                self._signal(writer.count)
                signalled_at = now
        writer.flush()
        self.flushed(writer)

    def store_frame(self, writer: logstore.LogWriter, stream: str, ts: str, data: bytes) -> None:
        """One message of the container's output (a line, or a piece of a long one;
        behind the output wrapper, a frame of lines)."""
        if self.framed and data.startswith(MARK) and self._unframe(writer, ts, data):
            return
        if not self.budget.take(1, len(data)):
            dropped(writer, 1, ts)
            return
        if writer.dropped:
            say_dropped(writer)  # before the first line past the drops: in order
        if self.masker:
            data = self.masker.bytes(data)
        writer.append(stream, data, ts)

    def _unframe(self, writer: logstore.LogWriter, ts: str, data: bytes) -> bool:
        """A wrapper's frame split back into its lines; False: no frame after all (a
        line the command wrote there itself is stored as it came: it is its output)."""
        if data[1:3] == b"x ":
            self.ended = True  # a process that wrote it early cut only its own log short
            return True
        found = FRAMED.get(data[1:2])
        if found is None or data[2:3] != b" ":
            return False
        try:
            text = base64.b64decode(data[3:].rstrip(b"\n"), validate=True)
        except binascii.Error:
            return False
        if self.masker:
            text = self.masker.bytes(text)  # before splitting: a value may span lines
        append_lines(writer, self.budget, found[0], text, found[1], ts)
        return True

    def flushed(self, writer: logstore.LogWriter) -> None:
        """What has arrived is stored: a flood's drops are said at
        least every NOTE_EVERY_S; a subclass stores what it keeps elsewhere."""
        if writer.dropped and time.monotonic() - writer.dropped_at >= NOTE_EVERY_S:
            say_dropped(writer)
            writer.flush()

    def _signal(self, seq: int) -> None:
        if not self.loop.is_closed():
            asyncio.run_coroutine_threadsafe(logstore.asignal(self.run_id, seq), self.loop)
