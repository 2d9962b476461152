"""A run's log: two append-only files per run, never database rows.

`<id>.log` holds one JSON object per line, `{"seq", "stream", "text", "ts"}`;
`<id>.idx` holds, per entry, the little-endian uint64 byte offset where that entry
ENDS in `.log`. Entry n therefore spans idx[n-2] (0 for n = 1) to idx[n-1], the count
is the index length // 8, and reading from any seq is one seek.

The files are the web host's (docs/hosts.md): a runner host's agent formats entries
(logs/shipped.py, the same cuts and caps as LogWriter) and sends them in batches through
the internal API, and `store` appends them here, one writer at a time (a lock on the
index). Any number of readers (daphne), in other processes, without locks:
1. the writer appends the data line, then its index slot;
2. a reader trusts only the index, so it never sees an entry whose data is not whole.

The channel layer only carries "there is more, up to seq N" (`signal`); readers always
read the files, so a signal that channels_redis drops loses nothing
(docs/architecture.md, "Engine facts").
"""

import fcntl
import json
import os
import struct
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from channels.layers import get_channel_layer
from django.conf import settings

from core import fanout

STREAMS = ("stdout", "stderr", "system")
# json's own C string escaper: an entry is built by hand around it, several times faster
# than json.dumps, and the agent may append a hundred thousand entries a second.
quote = json.encoder.encode_basestring
SLOT = struct.Struct("<Q")
READ_BLOCK = 256 << 10
# A reader answers at most this many bytes of log per call, whatever `limit` says:
# 5,000 entries of escaped 16 KB lines would otherwise be half a gigabyte.
MAX_READ_BYTES = 4 << 20


def paths(run_public_id: str) -> tuple[Path, Path]:
    if not (run_public_id.isascii() and run_public_id.isalnum()):
        raise ValueError(f"not a run id: {run_public_id!r}")  # it becomes a file name
    base = Path(settings.DATA_DIR) / "logs" / run_public_id[:2] / run_public_id
    return base.with_suffix(".log"), base.with_suffix(".idx")


def group_name(run_public_id: str) -> str:
    return f"run_{run_public_id}"


def _cut(raw: bytes, limit: int) -> int:
    """The largest length <= limit that does not split a UTF-8 character of `raw`."""
    if limit >= len(raw):
        return len(raw)
    while limit > 0 and raw[limit] & 0xC0 == 0x80:
        limit -= 1
    return limit


class LogWriter:
    """Appends entries to one run's log, on the web host, one writer at a time (`store`
    and `note` hold the log's lock; logs.shipped is a runner host's, which keeps no file).

    `count` (entries stored), `last_ts` (the Docker timestamp of the last entry that had
    one) and `total_bytes` (UTF-8 bytes of stdout/stderr text stored) survive a restart
    of the agent, so it can resume following Docker from `last_ts`.
    """

    def __init__(self, run_public_id: str, load: bool = True, locked: bool = False) -> None:
        """`load`: read the entries once for the writer's state (a follower resuming);
        without it only count and size are known (`store`: appends as given). `locked`:
        hold the log's lock until close (the web host's writers: one at a time)."""
        data_path, index_path = paths(run_public_id)
        data_path.parent.mkdir(parents=True, exist_ok=True)
        # Logs can hold whatever a command printed: readable by Berth's own user only.
        self._data = os.open(data_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        self._index = os.open(index_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        if locked:
            fcntl.flock(self._index, fcntl.LOCK_EX)  # released when the fd is closed
        self._start()
        self._recover(load)

    def _start(self) -> None:
        """The state of a writer before it knows its log's (LogWriter, logs.shipped)."""
        self.max_bytes: int = settings.RUN_LOG_MAX_BYTES
        self.max_line: int = settings.RUN_LOG_MAX_LINE
        self.count = 0
        self.size = 0
        self.total_bytes = 0
        self.truncated = False
        self.last_ts: str | None = None
        self.closed = False
        # Batching (the agent's follower during a flood): entries wait here and reach
        # the files in one write each at flush(); readers see them only then.
        self.batching = False
        self._pending: list[Any] = []  # lines here; (stream, text, ts) in logs.shipped
        self._pending_slots: list[bytes] = []
        # Lines a follower dropped over its sandbox's budget and has not yet said so in
        # this log (logs/follow.py): how many, the last one's engine timestamp, and when
        # the first of them was dropped (time.monotonic).
        self.dropped = 0
        self.dropped_ts: str | None = None
        self.dropped_at = 0.0

    def __enter__(self) -> "LogWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _recover(self, load: bool = True) -> None:
        """Make the two files agree after a crash, then reload the writer's state.

        1. Drop a torn index slot (the index length is not a multiple of 8).
        2. Drop index slots that point past the data (the page cache lost data but kept
           the index: only after a power loss, since data is written first).
        3. Truncate data past the last indexed end (a crash between the two writes).
        4. Read the entries once for total_bytes, last_ts and the truncation marker.
        """
        index_size = os.fstat(self._index).st_size
        data_size = os.fstat(self._data).st_size
        count = index_size // 8
        while count and self._slot(count) > data_size:
            count -= 1
        if count * 8 != index_size:
            os.ftruncate(self._index, count * 8)
        self.count, self.size = count, self._slot(count) if count else 0
        if data_size != self.size:
            os.ftruncate(self._data, self.size)
        if not load:
            return
        for entry in self._scan():
            if entry["stream"] == "system":
                self.truncated = self.truncated or entry["text"].startswith(
                    "[output truncated after "
                )
            else:
                self.total_bytes += len(entry["text"].encode())
            if entry["ts"] is not None:
                self.last_ts = entry["ts"]

    def _slot(self, seq: int) -> int:
        value: int = SLOT.unpack(os.pread(self._index, 8, (seq - 1) * 8))[0]
        return value

    def _scan(self) -> Iterator[dict[str, Any]]:
        """Every stored entry, in blocks: memory stays bounded however long the log."""
        offset, rest = 0, b""
        while offset < self.size:
            block = os.pread(self._data, min(READ_BLOCK, self.size - offset), offset)
            offset += len(block)
            *lines, rest = (rest + block).split(b"\n")
            if lines:
                yield from json.loads(b"[%b]" % b",".join(lines))

    def append(self, stream: str, data: bytes, ts: str | None = None) -> int:
        """Store one chunk (one Docker log message); return the new entry count.

        1. Drop stdout/stderr once the output has been truncated.
        2. Strip one trailing newline (readers add line breaks); decode, replacing
           invalid UTF-8; keep `\\r` and ANSI escapes for the browser to render.
        3. Cut the text at the byte cap; it then ends with one system marker.
        4. Split the text into entries of at most max_line bytes.
        """
        if stream not in STREAMS:
            raise ValueError(f"unknown stream {stream!r}")
        output = stream != "system"
        if output and self.truncated:
            return self.count
        if data.endswith(b"\n"):
            data = data[:-1]
        # The common case in one decode (a flood is short valid lines): valid UTF-8,
        # within a line and within the cap, is stored as it is.
        if len(data) <= self.max_line and self.total_bytes + len(data) <= self.max_bytes:
            try:
                text = data.decode()
            except UnicodeDecodeError:
                pass
            else:
                self._write(stream, text, ts)
                if output:
                    self.total_bytes += len(data)
                return self.count
        raw = data.decode("utf-8", "replace").encode()
        over = False
        if output and self.total_bytes + len(raw) > self.max_bytes:
            raw = raw[: _cut(raw, self.max_bytes - self.total_bytes)]
            over = True
        start = 0
        while True:
            end = start + _cut(raw[start : start + self.max_line + 1], self.max_line)
            if end == start and start < len(raw):
                end = start + self.max_line  # max_line < one character: still progress
            if end > start or not over:  # keep empty lines, but not an empty cut remainder
                self._write(stream, raw[start:end].decode("utf-8", "replace"), ts)
            start = end
            if start >= len(raw):
                break
        if output:
            self.total_bytes += len(raw)
        if over:
            self.truncated = True
            self._write("system", f"[output truncated after {self.total_bytes} bytes]", None)
        return self.count

    def append_system(self, text: str) -> int:
        """A line from Berth itself ("pulling image…", "killed: timeout"); never capped."""
        return self.append("system", text.encode("utf-8", "replace"))

    def _write(self, stream: str, text: str, ts: str | None) -> None:
        line = (
            f'{{"seq":{self.count + 1},"stream":"{stream}","text":{quote(text)},'
            f'"ts":{"null" if ts is None else quote(ts)}}}\n'
        ).encode()
        self._pending.append(line)
        self._pending_slots.append(SLOT.pack(self.size + len(line)))
        self.size += len(line)
        self.count += 1
        if ts is not None:
            self.last_ts = ts
        if not self.batching:
            self.flush()

    def flush(self) -> None:
        """Write pending entries: all the data first, then their index slots."""
        if not self._pending:
            return
        data, slots = b"".join(self._pending), b"".join(self._pending_slots)
        flushed = len(self._pending)
        self._pending.clear()
        self._pending_slots.clear()
        start = self.size - len(data)
        try:
            _write_all(self._data, data)  # data first: see the module docstring
            _write_all(self._index, slots)
        except OSError:
            # A full disk mid-write: undo the partial write, or later offsets would be off.
            self.size, self.count = start, self.count - flushed
            os.ftruncate(self._data, self.size)
            os.ftruncate(self._index, self.count * 8)
            raise

    def close(self) -> None:
        if not self.closed:
            self.flush()
            self.closed = True
            os.close(self._data)
            os.close(self._index)


def _write_all(fd: int, data: bytes) -> None:
    written = os.write(fd, data)
    while written < len(data):  # rare for a regular file (a full disk, a signal)
        written += os.write(fd, data[written:])


def note(run_public_id: str, text: str) -> int:
    """One system line from Berth ("[preview] failed: …"), at the end of the log, on the
    web host (a runner host's go through logs.shipped). The new entry count."""
    with LogWriter(run_public_id, load=False, locked=True) as writer:
        writer.append_system(text)
    signal(run_public_id, writer.count)
    return writer.count


class Moved(Exception):
    """A batch names a place in the log that is no longer its end: the log holds
    `count` entries (another writer's note went in first)."""

    def __init__(self, count: int) -> None:
        super().__init__(f"the log holds {count} entries")
        self.count = count


class Full(Exception):
    """A log past what a runner host's writer could have made of any run's output."""


def most_bytes() -> int:
    """The web host's own bound on a log's file, whatever a runner host sends: the
    output cap in JSON's worst escaping (6 bytes a character), and room for notes."""
    return 6 * settings.RUN_LOG_MAX_BYTES + (4 << 20)


Entry = tuple[str, str, str | None]  # stream, text, engine timestamp


def store(run_public_id: str, after: int | None, entries: Sequence[Entry]) -> int:
    """Entries a runner host formatted (logs.shipped: cut, split and capped there), at
    the end of the log: after entry `after`, or wherever the end is (None: a note). The
    same batch sent again (its answer was lost) is kept once. The new entry count."""
    with LogWriter(run_public_id, load=False, locked=True) as writer:
        if writer.size > most_bytes():
            raise Full(f"the log holds {writer.size >> 20} MB, past what any run's may")
        if after is not None and writer.count != after:
            if entries and writer.count == after + len(entries) and _ends_with(writer, entries):
                return writer.count
            raise Moved(writer.count)
        writer.batching = True
        count, size = writer.count, writer.size
        try:
            for stream, text, ts in entries:
                writer._write(stream, text, ts)
        except Exception:  # text that is no Unicode (a lone surrogate): none of it kept
            writer._pending.clear()
            writer._pending_slots.clear()
            writer.count, writer.size = count, size
            raise
    return writer.count


def _ends_with(writer: LogWriter, entries: Sequence[Entry]) -> bool:
    start = writer._slot(writer.count - 1) if writer.count > 1 else 0
    last = json.loads(os.pread(writer._data, writer.size - start, start))
    return (last["stream"], last["text"], last["ts"]) == tuple(entries[-1])


def cursor(run_public_id: str) -> dict[str, Any]:
    """Where a follower resumes: the log's count, its last engine timestamp, the output
    bytes it holds and whether it was truncated (read once, at a follower's start)."""
    with LogWriter(run_public_id, locked=True) as writer:
        return {
            "count": writer.count,
            "last_ts": writer.last_ts,
            "total_bytes": writer.total_bytes,
            "truncated": writer.truncated,
        }


def count(run_public_id: str) -> int:
    try:
        return os.stat(paths(run_public_id)[1]).st_size // 8
    except FileNotFoundError:
        return 0


def read(
    run_public_id: str, after: int, limit: int = 1000, max_bytes: int = MAX_READ_BYTES
) -> list[dict[str, Any]]:
    """Entries with seq > after, oldest first: at most `limit`, and fewer when they
    would pass `max_bytes` (but always at least one, if there is one)."""
    lines = _read_lines(run_public_id, after, limit, max_bytes)
    # One parse of a JSON array, not one per line: about twice as fast for a batch.
    entries: list[dict[str, Any]] = json.loads(b"[%b]" % b",".join(lines)) if lines else []
    return entries


def _read_lines(
    run_public_id: str, after: int, limit: int = 1000, max_bytes: int = MAX_READ_BYTES
) -> list[bytes]:
    """The stored JSON lines of `read`, undecoded."""
    after, limit = max(0, after), max(1, limit)
    data_path, index_path = paths(run_public_id)
    try:
        index = os.open(index_path, os.O_RDONLY)
    except FileNotFoundError:
        return []
    try:
        # Only whole slots: the writer's 8-byte append may be in flight.
        available = os.fstat(index).st_size // 8 - after
        if available <= 0:
            return []
        first = max(0, after - 1)
        raw = os.pread(index, (after - first + min(limit, available)) * 8, first * 8)
    finally:
        os.close(index)
    ends = [e for (e,) in SLOT.iter_unpack(raw[: len(raw) // 8 * 8])]
    start = ends.pop(0) if after else 0
    # Entries whose end is within max_bytes of start; at least the first.
    n = max(1, bisect_right(ends, start + max_bytes))
    fd = os.open(data_path, os.O_RDONLY)
    try:
        data = os.pread(fd, ends[n - 1] - start, start)
    finally:
        os.close(fd)
    return data.split(b"\n")[:n]


def signal(run_public_id: str, seq: int, ended: bool = False) -> None:
    """Tell the run's watchers there are entries up to `seq`, and with `ended` that the
    run's end is written (from sync code; sent in the background, the caller goes on)."""
    fanout.group_send(group_name(run_public_id), {"type": "log.signal", "seq": seq, "ended": ended})


async def asignal(run_public_id: str, seq: int) -> None:
    """Tell the run's watchers there are entries up to `seq`, or that the run ended.

    Call it after appending, and once more after the run's end is written: a watcher
    re-reads the run's state and the files on every signal.
    """
    layer = get_channel_layer()
    if layer is not None:
        await layer.group_send(group_name(run_public_id), {"type": "log.signal", "seq": seq})
