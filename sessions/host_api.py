"""The internal API's doors for a session's files (runner hosts, part 2; docs/hosts.md):
what its host's agent needs of the workspace's Git store, which the web host alone
holds. A host is shown only the sessions placed on it, and of a sync only while it is
pending; anything else is no session of its (404)."""

from typing import Any

from django.http import HttpRequest
from ninja import Router, Schema

from core.errors import BerthError, NotFound
from sandbox.hosts import Host
from sessions import syncplan
from sessions.models import LIVE_STATES, Session, SessionSync, SyncState

router = Router(tags=["sessions"])


class BatchOut(Schema):
    files: list[dict[str, Any]]
    refused: list[dict[str, str]]
    bases: dict[str, dict[str, Any] | None]
    next: int
    total: int


def placed_session(request: HttpRequest, session_id: str) -> Session:
    host: Host = request.auth  # type: ignore[attr-defined]
    session = (
        Session.objects.select_related("workspace__team")
        .filter(public_id=session_id, runner_host=host.name, state__in=LIVE_STATES)
        .first()
    )
    if session is None:
        raise NotFound(f"No live session {session_id} is placed on host {host.name}.")
    return session


@router.get("/sessions/{session_id}/syncs/{sync_id}", response=BatchOut)
def sync_batch(request: HttpRequest, session_id: str, sync_id: int, at: int = 0) -> BatchOut:
    """The batch of a pending sync that starts at item `at`: from the session's base
    (as its row says now) to the sync's commit. 422 `commit_unreadable` when either is
    gone from the store (the sync fails, nothing applied)."""
    session = placed_session(request, session_id)
    row = SessionSync.objects.filter(pk=sync_id, session=session, state=SyncState.PENDING).first()
    if row is None:
        raise NotFound(f"Session {session_id} has no pending sync {sync_id}.")
    try:
        batch = syncplan.batch_at(session, session.base_commit, row.commit, max(at, 0))
    except Exception as e:  # a commit gone from the store: nothing can be applied
        raise BerthError(
            f"the commit cannot be read ({e})", code="commit_unreadable", status=422
        ) from None
    return BatchOut(
        files=batch.files,
        refused=batch.refused,
        bases=batch.bases,
        next=batch.next,
        total=batch.total,
    )
