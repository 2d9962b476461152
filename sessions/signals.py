"""Signals sessions sends to the apps above it (previews), which it may not import."""

import logging
from typing import Any

from django.dispatch import Signal

log = logging.getLogger("berth.sessions")

# Sent after the commit that gave a session a secret it did not have (kwargs: session,
# names: all it holds now): what serves from the session (its previews) and the log
# sockets of its run follow the grant from here (previews.of_sessions.on_session_granted,
# sessions.access.on_session_granted).
session_granted = Signal()


def announce_grant(session: Any, names: list[str]) -> None:
    """Tell the receivers of `session_granted`; a receiver's failure is logged, never
    allowed to undo the grant (its previews' caches also notice the new grant within
    their own second: previews.lookups)."""
    for receiver, result in session_granted.send_robust(
        type(session), session=session, names=names
    ):
        if isinstance(result, Exception):
            log.error("%s failed after session %s was granted: %r", receiver, session, result)
