"""Following one container's output into the log store, on a thread of its own.

Docker's logs endpoint is read raw, so each frame keeps its stream (stdout/stderr) and
its timestamp. After an agent restart the follower resumes after the last stored
timestamp: nothing twice, nothing missed (the engine keeps the container's output
until the container is removed, which only happens after the log is complete).
"""

import asyncio
import calendar
import logging
import struct
import threading
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import docker

from logs import logstore
from sandbox.engine import engine

log = logging.getLogger("berth.runner_agent")

SIGNAL_EVERY_S = 0.05  # coalesce "new entries" signals: readers catch up from storage


def ts_ns(ts: bytes | str) -> int:
    """Nanoseconds since the epoch of Docker's RFC 3339 timestamp (trailing zeros of the
    fraction are trimmed by Docker, so strings do not compare)."""
    text = ts.decode() if isinstance(ts, bytes) else ts
    date, _, frac = text.rstrip("Z").partition(".")
    seconds = calendar.timegm(time.strptime(date, "%Y-%m-%dT%H:%M:%S"))
    return seconds * 1_000_000_000 + int((frac + "000000000")[:9] or 0)


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
    buf, pos, left = bytearray(), 0, 0  # left: bytes still due in the current chunk
    while True:
        data = fp.read1(1 << 16)
        if not data:
            return
        buf += data
        out = bytearray()
        while pos < len(buf):
            if left:
                take = min(left, len(buf) - pos)
                out += buf[pos : pos + take]
                pos += take
                left -= take
                continue
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                break
            line = bytes(buf[pos:eol]).split(b";")[0].strip()
            if line == b"":  # the CRLF that ends a chunk's data
                pos = eol + 2
                continue
            left = int(line, 16)
            if left == 0:
                if out:
                    yield bytes(out)
                return
            pos = eol + 2
        del buf[:pos]
        pos = 0
        if out:
            yield bytes(out)


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
    ) -> None:
        """`masker`: called once, when following starts, for what masks each piece of
        output before it is stored (an object with `bytes(data) -> data`)."""
        super().__init__(name=f"follow-{run_id}", daemon=True)
        self.run_id, self.container, self.loop = run_id, container, loop
        self.make_masker = masker
        self.masker: Any = None
        self.done = threading.Event()
        self.count = 0
        self.bytes = 0

    def run(self) -> None:
        writer = logstore.LogWriter(self.run_id)
        try:
            self._follow(writer)
        except Exception:
            log.exception("following %s failed", self.container)
        finally:
            self.count = writer.count
            self.bytes = getattr(writer, "total_bytes", 0)
            writer.close()
            self._signal(self.count)
            self.done.set()

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
        if writer.last_ts:
            params["since"] = str(Decimal(ts_ns(writer.last_ts)) / Decimal(1_000_000_000))
        try:
            response = api._get(
                api._url("/containers/{0}/logs", self.container), params=params, stream=True
            )
            api._raise_for_status(response)
        except docker.errors.NotFound:
            return None
        return response

    def _store(self, response: Any, writer: logstore.LogWriter) -> None:
        last = ts_ns(writer.last_ts) if writer.last_ts else None
        signalled_at = 0.0
        for frame in _frames(_blocks(response)):
            if frame is not None:
                stream, payload = frame
                ts, _, data = payload.partition(b" ")
                at = ts_ns(ts)
                if last is not None and at <= last:
                    continue  # already stored (before a restart, or by the follow stream)
                last = at
                self.store_frame(writer, "stderr" if stream == 2 else "stdout", ts.decode(), data)
                if len(writer._pending) < 10_000:
                    continue
            # All that has arrived is parsed (or a big batch is waiting): store it, and
            # tell readers, at most every SIGNAL_EVERY_S.
            writer.flush()
            self.flushed(writer)
            now = time.monotonic()
            if now - signalled_at >= SIGNAL_EVERY_S:
                self._signal(writer.count)
                signalled_at = now
        writer.flush()
        self.flushed(writer)

    def store_frame(self, writer: logstore.LogWriter, stream: str, ts: str, data: bytes) -> None:
        """One message of the container's output (a line, or a piece of a long one)."""
        if self.masker:
            data = self.masker.bytes(data)
        writer.append(stream, data, ts)

    def flushed(self, writer: logstore.LogWriter) -> None:
        """What has arrived is stored: a subclass stores what it keeps elsewhere."""

    def _signal(self, seq: int) -> None:
        if not self.loop.is_closed():
            asyncio.run_coroutine_threadsafe(logstore.asignal(self.run_id, seq), self.loop)
