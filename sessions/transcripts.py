"""Where a session's terminals' transcripts are kept, and the channel their bytes
travel on (sessions/terminals.py has the rest). Kept apart so the lifecycle, below the
actions, can remove them with the session.

A transcript is the web host's: its session's host records it (sessions.recorder,
masked there) and sends it here in chunks through the internal API
(sessions.host_api), each with where it goes: the transcript's length it was sent
after and the terminal's output offset it reaches. A chunk sent twice (its answer lost)
or after another is refused with where the transcript is; a position file, written
after each append, says so after a restart (nothing is recorded twice).
"""

import contextlib
import fcntl
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings

from sessions.models import Session, SessionState, Terminal

TRANSCRIPT_MAX = 8 << 20  # bytes kept per terminal; past it the transcript says so


def relay_channel(host: str) -> str:
    """The runner agent's own channel for terminal traffic: a plain channel name (not a
    group, whose sends drop silently when a member is full), received by that agent."""
    return f"terminals.{host}"


def transcript_dir(session: Session) -> Path:
    return Path(settings.DATA_DIR) / "terminals" / session.public_id


def transcript_path(term: Terminal) -> Path:
    return transcript_dir(term.session) / f"{term.public_id}.log"


def remove_transcripts(session: Session) -> None:
    """With the session's files: at its deletion (its retention)."""
    shutil.rmtree(transcript_dir(session), ignore_errors=True)


def sweep() -> int:
    """The transcripts of sessions deleted (or gone) since they were recorded: a session
    its host's agent deleted (its retention, or its end after a delete) had its volume
    removed there, and its transcripts are the web host's. How many sessions' went."""
    root = Path(settings.DATA_DIR) / "terminals"
    try:
        found = {p.name for p in root.iterdir() if p.is_dir() and not p.is_symlink()}
    except FileNotFoundError:
        return 0
    kept = set(
        Session.objects.filter(public_id__in=found)
        .exclude(state=SessionState.DELETED)
        .values_list("public_id", flat=True)
    )
    for public_id in found - kept:
        shutil.rmtree(root / public_id, ignore_errors=True)
    return len(found - kept)


def read_transcript(term: Terminal, limit: int = TRANSCRIPT_MAX) -> bytes:
    try:
        with open(transcript_path(term), "rb") as f:
            return f.read(limit)
    except FileNotFoundError:
        return b""


class Moved(Exception):
    """A chunk sent after another length than the transcript's: where it is."""

    def __init__(self, raw: int, size: int) -> None:
        super().__init__(f"the transcript is at {size} bytes (output offset {raw})")
        self.raw, self.size = raw, size


def _positions(path: Path) -> Path:
    return path.with_suffix(".pos")


@contextlib.contextmanager
def _held(path: Path) -> Iterator[None]:
    """One append at a time per transcript, whichever process serves it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def position(term: Terminal) -> tuple[int, int]:
    """Where recording goes on: the output offset recorded up to, and the transcript's
    length then (anything past it, written before a crash, is cut off)."""
    path = transcript_path(term)
    with _held(path):
        return _position(path)


def _position(path: Path) -> tuple[int, int]:
    try:
        saved = json.loads(_positions(path).read_text())
        raw_at, size = int(saved["raw"]), int(saved["size"])
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        raw_at, size = 0, 0
    with open(path, "ab") as f:
        f.truncate(size)
    return raw_at, size


def append(term: Terminal, data: bytes, after_size: int, raw_at: int) -> tuple[int, int]:
    """`data` appended if the transcript is `after_size` long (else Moved), up to
    TRANSCRIPT_MAX, past which it says so once; the output offset `raw_at` recorded.
    The new (raw offset, length)."""
    path = transcript_path(term)
    with _held(path):
        raw_before, size = _position(path)
        if size != after_size or raw_at < raw_before:
            raise Moved(raw_before, size)
        if size < TRANSCRIPT_MAX:
            room = TRANSCRIPT_MAX - size
            chunk = data[:room]
            if len(data) > room:
                chunk += b"\r\n[berth] the transcript stops here: it is at its most (8 MiB)\r\n"
            with open(path, "ab") as out:
                out.write(chunk)
            size += len(chunk)
        tmp = _positions(path).with_suffix(".pos.tmp")
        tmp.write_text(json.dumps({"raw": raw_at, "size": size}))
        os.replace(tmp, _positions(path))
        return raw_at, size
