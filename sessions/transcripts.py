"""Where a session's terminals' transcripts are kept, and the channel their bytes
travel on (sessions/terminals.py has the rest). Kept apart so the lifecycle, below the
actions, can remove them with the session."""

import shutil
from pathlib import Path

from django.conf import settings

from sessions.models import Session, Terminal

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


def read_transcript(term: Terminal, limit: int = TRANSCRIPT_MAX) -> bytes:
    try:
        with open(transcript_path(term), "rb") as f:
            return f.read(limit)
    except FileNotFoundError:
        return b""
