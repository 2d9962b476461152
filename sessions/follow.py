"""Following a session's container: its execs' framed output into each exec's log.

The exec channel writes every exec's output and end as frames on the container's
stdout (sandbox/in_image/berth_session.py), which the engine keeps; this follower reads
them as a run's follower reads a command's output (logs.follow) and sends each to its
exec's log in the same store, masked with that exec's granted values. An end frame
ends the exec. Lines that are no frame (the channel's own, a [setup] step's) go to the
log of the session's run.

The channel's own lines are signed too, once the agent handed it its key at the first
ping (sessions.channel): frames under the reserved id OWN_ID, checked against the
channel's key, go to the session run's log. From the first of them on, a line that is
no signed frame was written into the channel's output by some process of the sandbox
(gVisor lets one open /proc/1/fd/1): it is counted, said in the run's log, and dropped.
Before it, only the channel runs in the container, so its lines are kept. Whatever
goes to the run's log is masked with the session's granted values (docs/security.md, 26).

After an agent restart it resumes from the last timestamp it handled (a cursor file in
the host's own state dir, with the last frame number of each exec), and each exec's log
skips what it already holds: nothing twice, nothing missed, and an exec that ended
meanwhile gets its end from its frame. A frame counts only when signed with its exec's
key and numbered past the last one taken (sessions/frames.py).
"""

import asyncio
import base64
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection

from logs import logstore
from logs.follow import (
    NOTE_EVERY_S,
    SIGNAL_EVERY_S,
    Follower,
    append_lines,
    say_dropped,
    ts_ns,
)
from logs.shipped import ShippedLog, exec_log
from runs import secrets
from sandbox.models import Sandbox
from sessions.channel import channel_key
from sessions.frames import LINES, MARK, OWN_ID, Frame, frame_key, parse
from sessions.lifecycle import signal_ended
from sessions.models import Exec, ExecState, Session
from sessions.outcomes import describe_end

log = logging.getLogger("berth.runner_agent")

REFRESH_S = 0.2  # unknown exec ids look the session's running execs up at most this often
UNSIGNED_NOTE_EVERY_S = 5.0  # unsigned lines dropped: said in the agent's log at most this often


# Exec ids the keeper of this process handed to each session run's channel, so their
# first frames are taken at once (sessions.keeper adds them before it asks the channel).
HANDED: dict[str, set[str]] = {}


def handed(run_id: str, exec_id: str) -> None:
    HANDED.setdefault(run_id, set()).add(exec_id)


def valid_end(body: bytes) -> dict[str, Any]:
    """An end frame's facts, each of its type or absent: a malformed frame never stops
    the follower (it would stop at the same frame again after every restart)."""
    try:
        end = json.loads(body)
    except ValueError:
        return {}
    if not isinstance(end, dict):
        return {}
    facts: dict[str, Any] = {}
    for key in ("exit_code", "signal"):
        if isinstance(end.get(key), int) and not isinstance(end.get(key), bool):
            facts[key] = end[key]
    if end.get("reason") in ("timeout", "killed", "oom_killed", "session_stopped"):
        facts["reason"] = end["reason"]
    return facts


def cursor_path(run_id: str) -> Path:
    if not (run_id.isascii() and run_id.isalnum()):
        raise ValueError(f"not a run id: {run_id!r}")  # it becomes a file name
    return Path(settings.HOST_STATE_DIR) / "session-cursors" / f"{run_id}.cursor"


def read_cursor(path: Path) -> tuple[str, dict[str, int]]:
    """The last timestamp handled and each running exec's last frame number."""
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return "", {}
    try:
        saved = json.loads(text)
    except ValueError:
        return text, {}  # a bare timestamp, as written before frames were numbered
    if not isinstance(saved, dict):
        return "", {}
    seqs = saved.get("seqs")
    if not isinstance(seqs, dict):
        seqs = {}
    return str(saved.get("ts") or ""), {
        str(k): v for k, v in seqs.items() if isinstance(v, int) and not isinstance(v, bool)
    }


def masker_for(row: Exec, session_values: dict[str, str]) -> secrets.Masker:
    """Its own secrets and every one granted to its session so far: a later exec's
    secret can reach this one's output through the files and processes they share."""
    own = secrets.open_sealed(row.secrets_sealed or "")
    return secrets.Masker([*own.values(), *session_values.values()])


class _ExecLog:
    def __init__(self, row: Exec, seq: int | None, session_values: dict[str, str]) -> None:
        self.row = row
        self.key = frame_key(row.public_id)
        self.seq = seq  # the last frame number taken; None: not known (a first sight)
        self.writer = ShippedLog(exec_log(row.public_id))
        self.writer.batching = True
        self.masker = masker_for(row, session_values)
        self.last = ts_ns(self.writer.last_ts) if self.writer.last_ts else None
        self.dirty = False
        self.signalled_at = 0.0


class SessionFollower(Follower):
    def __init__(self, run_id: str, sandbox: Sandbox, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(run_id, sandbox.name, loop)
        self.execs: dict[str, _ExecLog] = {}  # running execs handed to its channel
        self.refreshed_at = 0.0
        self.cursor = cursor_path(run_id)
        self.resumed_seqs: dict[str, int] = {}  # from the cursor, for execs not seen yet
        self.granted = ""  # the session's masking set (sealed), as last read
        self.granted_values: dict[str, str] = {}
        # The channel's own lines (OWN_ID): its key, the last number taken, and whether
        # it was keyed (from then on, unsigned lines are dropped and counted).
        self.channel_key = channel_key(sandbox.public_id)
        self.sandbox_pk = sandbox.pk
        self.own_seq = 0
        self.keyed = False  # the row says its key was handed (before the channel's line)
        self.unsigned = 0
        self.unsigned_noted = 0
        self.unsigned_noted_at = 0.0
        self.run_granted = ""  # likewise, for the run's own log
        self.run_masker = secrets.Masker([])
        self.run_masked_at = -REFRESH_S
        self.cursor_at = 0.0

    def run(self) -> None:
        try:
            super().run()
        finally:
            for entry in self.execs.values():
                self._close(entry.writer)
            connection.close()

    def _follow(self, writer: logstore.LogWriter) -> None:
        resumed, self.resumed_seqs = read_cursor(self.cursor)
        self.own_seq = self.resumed_seqs.pop(OWN_ID, 0)
        # The row is marked before the key is handed: after an agent restart, a cursor
        # older than the channel's "keyed" line must not let unsigned lines in again.
        self.keyed = Sandbox.objects.filter(
            pk=self.sandbox_pk, channel_keyed_at__isnull=False
        ).exists()
        close_old_connections()
        if resumed and (not writer.last_ts or ts_ns(resumed) > ts_ns(writer.last_ts)):
            writer.last_ts = resumed
        super()._follow(writer)
        if writer.last_ts:
            self._save_cursor(writer.last_ts)  # the last one, whenever the one before was

    def store_frame(self, writer: logstore.LogWriter, stream: str, ts: str, data: bytes) -> None:
        writer.last_ts = ts  # the cursor moves past a frame whatever log it went to
        if data.startswith(MARK + OWN_ID.encode() + b" "):
            self._own_line(writer, data[1:], ts)
        elif data.startswith(MARK):
            try:
                self._exec_frame(data[1:], ts)
            except Exception:
                # One bad frame is dropped; following goes on past it.
                log.exception("session run %s: a frame was dropped", self.run_id)
        elif self.own_seq or self.keyed:
            self.unsigned += 1  # written after the key by a process of the sandbox
        else:
            super().store_frame(writer, stream, ts, self._masked(data))

    def _own_line(self, writer: logstore.LogWriter, data: bytes, ts: str) -> None:
        """One of the channel's own lines, signed with its key and numbered past the last."""
        found = parse(data)
        if found is None or found.seq <= self.own_seq or not found.signed_by(self.channel_key):
            self.unsigned += 1
            return
        if not self.own_seq:
            self.cursor_at = -SIGNAL_EVERY_S  # keyed: the cursor says so at this block's end
        self.own_seq = found.seq
        try:
            text = base64.b64decode(found.data, validate=True)
        except ValueError:
            return
        writer.append("stderr", self._masked(text), ts)

    def _masked(self, data: bytes) -> bytes:
        """Masked with every value granted to the session so far (read at most every
        REFRESH_S: a grant reaches the session's row before the exec that carries it)."""
        now = time.monotonic()
        if now - self.run_masked_at >= REFRESH_S:
            self.run_masked_at = now
            found = (
                Session.objects.filter(run__public_id=self.run_id)
                .values_list("secrets_sealed", flat=True)
                .first()
            )
            # Sealed again whenever a grant adds a name or a value (Session.grant).
            if found and found != self.run_granted:
                self.run_granted = found
                self.run_masker = secrets.Masker(secrets.open_sealed(found))
            close_old_connections()
        return self.run_masker.bytes(data) if self.run_masker else data

    def flushed(self, writer: logstore.LogWriter) -> None:
        """Each exec's new entries stored and told (at most every SIGNAL_EVERY_S each),
        then the cursor: after an agent restart, following resumes past it."""
        super().flushed(writer)
        now = time.monotonic()
        for entry in self.execs.values():
            if entry.writer.dropped and now - entry.writer.dropped_at >= NOTE_EVERY_S:
                say_dropped(entry.writer)
                entry.dirty = True
            if entry.dirty:
                entry.writer.flush()
                entry.dirty = False
                if now - entry.signalled_at >= SIGNAL_EVERY_S:
                    entry.signalled_at = now
                    logstore.signal(entry.row.public_id, entry.writer.count)
        if self.unsigned > self.unsigned_noted:
            # Said at the end of the block that dropped them, never held for a later one
            # (the session may write nothing more): one note per block read, not per
            # line; the agent's own log hears of it at most every UNSIGNED_NOTE_EVERY_S.
            note = (
                f"[berth] {self.unsigned - self.unsigned_noted} line(s) the exec channel did "
                f"not sign were dropped ({self.unsigned} since the agent began following): "
                "a process in the sandbox wrote into the channel's output\n"
            )
            writer.append("stderr", note.encode(), writer.last_ts or "")
            writer.flush()
            if now - self.unsigned_noted_at >= UNSIGNED_NOTE_EVERY_S:
                log.warning("session run %s: %s", self.run_id, note.strip())
                self.unsigned_noted_at = now
            self.unsigned_noted = self.unsigned
        # The cursor at most every SIGNAL_EVERY_S (one file write, not one a block): an
        # older cursor only means frames read again after a restart, each log skipping
        # what it holds.
        if writer.last_ts and now - self.cursor_at >= SIGNAL_EVERY_S:
            self.cursor_at = now
            self._save_cursor(writer.last_ts)

    def _save_cursor(self, ts: str) -> None:
        seqs = {i: e.seq for i, e in self.execs.items() if e.seq is not None}
        if self.own_seq:
            seqs[OWN_ID] = self.own_seq
        self.cursor.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.cursor.with_suffix(".cursor.tmp")
        tmp.write_text(json.dumps({"ts": ts, "seqs": seqs}))
        os.replace(tmp, self.cursor)

    def _entry(self, exec_id: str) -> _ExecLog | None:
        """The log of a running exec Berth handed to this session's channel, or None.

        A process in the sandbox can ask the channel for execs of its own, under ids
        Berth never handed out: their frames are nobody's output, and they must cost
        neither memory nor a query each. So unknown ids are looked up together, at most
        every REFRESH_S (the session's running execs), and never remembered."""
        handed_here = HANDED.get(self.run_id, set())
        # An exec this process's keeper handed out is looked up at once, even before
        # its own first frame: it may have been granted a secret that the others'
        # output must mask from now on. Otherwise (after an agent restart), unknown
        # ids are looked up at most every REFRESH_S.
        pending = not handed_here <= self.execs.keys()
        entry = self.execs.get(exec_id)
        if entry is not None and not pending:
            return entry
        now = time.monotonic()
        if pending or now - self.refreshed_at >= REFRESH_S:
            self.refreshed_at = now
            self._refresh(handed_here)
        return self.execs.get(exec_id)

    def _refresh(self, handed_here: set[str]) -> None:
        rows = list(
            Exec.objects.select_related("session").filter(
                session__run__public_id=self.run_id, state=ExecState.RUNNING
            )
        )
        if rows and rows[0].session.secrets_sealed != self.granted:
            session = rows[0].session
            self.granted = session.secrets_sealed
            self.granted_values = secrets.open_sealed(session.secrets_sealed)
            for entry in self.execs.values():
                entry.masker = masker_for(entry.row, self.granted_values)
        for row in rows:
            if row.public_id not in self.execs:
                # Handed by this process: its frames are numbered from 1.
                fresh = 0 if row.public_id in handed_here else None
                seq = self.resumed_seqs.pop(row.public_id, fresh)
                self.execs[row.public_id] = _ExecLog(row, seq, self.granted_values)
        # Handed, but no longer running (it ended before its first frame was read):
        # nothing of it is waited for.
        handed_here.difference_update(handed_here - self.execs.keys())
        close_old_connections()

    def _exec_frame(self, data: bytes, ts: str) -> None:
        found = parse(data)
        if found is None:
            return
        entry = self._entry(found.exec_id)
        if entry is None or not self._next(entry, found, ts):
            return
        if entry.last is not None:
            if ts_ns(ts) <= entry.last:
                return  # already in its log (stored past the cursor before a restart)
            entry.last = None  # frames come in order: nothing after this one is
        if found.kind == b"x":
            self._end(found.exec_id, entry, found.data)
            return
        try:
            text = base64.b64decode(found.data, validate=True)
        except ValueError:
            return
        if entry.masker:
            text = entry.masker.bytes(text)  # before splitting: a value may span lines
        self._lines(entry, LINES[found.kind], text, found.kind in (b"O", b"E"), ts)

    def _lines(self, entry: _ExecLog, stream: str, text: bytes, whole: bool, ts: str) -> None:
        append_lines(entry.writer, self.budget, stream, text, whole, ts)
        entry.dirty = True

    @staticmethod
    def _next(entry: _ExecLog, found: Frame, ts: str) -> bool:
        """Whether it is the exec's next frame: signed with its key, numbered past the
        last taken. A gap in the numbers (frames that never reached the engine's log)
        is said in the exec's log, counted, rather than passed over in silence."""
        if entry.seq is not None and found.seq <= entry.seq:
            return False  # a repeat
        if not found.signed_by(entry.key):
            return False
        missing = found.seq - entry.seq - 1 if entry.seq is not None else 0
        entry.seq = found.seq
        if missing:
            note = f"[berth] {missing} frame(s) of this exec's output never arrived\n"
            entry.writer.append("stderr", note.encode(), ts)
            entry.dirty = True
        return True

    def _end(self, exec_id: str, entry: _ExecLog, body: bytes) -> None:
        end = valid_end(body)
        # Before its end: the log's last word on its output. A web host that did not
        # take it never keeps the exec from ending (said in the agent's log).
        self._close(entry.writer)
        del self.execs[exec_id]  # no frame of it after its end counts (it is not running)
        HANDED.get(self.run_id, set()).discard(exec_id)
        row = entry.row
        reason, message = describe_end(end, timeout_s=row.timeout_s)
        row.finish(
            reason,
            message,
            exit_code=end.get("exit_code"),
            signal=end.get("signal"),
            log_entries=entry.writer.count,
        )
        close_old_connections()
        signal_ended(row, entry.writer.count)
