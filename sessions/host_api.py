"""The internal API's doors for a session (runner hosts, part 2; docs/hosts.md): what its
host's agent needs of the workspace's Git store, which the web host alone holds, and
what it sends of the session to be kept there (its terminals' transcripts). A host is
shown only the sessions placed on it, and of a sync only while it is pending; anything
else is no session of its (404)."""

import base64
import binascii
from typing import Any

from django.http import HttpRequest
from ninja import Router, Schema

from core.errors import BerthError, Conflict, Invalid, NotFound
from logs import intake
from sandbox.hosts import Host
from sessions import snapshot, syncplan, transcripts
from sessions.models import (
    LIVE_STATES,
    Exec,
    Session,
    SessionState,
    SessionSync,
    SyncState,
    Terminal,
)

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
    except syncplan.Unreadable as e:  # nothing can be applied (any other fault: a 500,
        # and the sync stays pending for the agent's next try)
        raise BerthError(str(e), code="commit_unreadable", status=422) from None
    return BatchOut(
        files=batch.files,
        refused=batch.refused,
        bases=batch.bases,
        next=batch.next,
        total=batch.total,
    )


class TranscriptAt(Schema):
    raw: int  # the terminal's output offset recorded up to
    size: int  # the transcript's length


class TranscriptChunk(Schema):
    size: int  # the transcript's length this chunk goes after
    raw: int  # the output offset it reaches
    data: str  # base64 of the masked bytes


def placed_terminal(request: HttpRequest, terminal_id: str) -> Terminal:
    host: Host = request.auth  # type: ignore[attr-defined]
    term = (
        Terminal.objects.select_related("session")
        .filter(public_id=terminal_id, session__runner_host=host.name)
        .exclude(session__state=SessionState.DELETED)
        .first()
    )
    if term is None:
        raise NotFound(f"No terminal {terminal_id} is of a session on host {host.name}.")
    return term


@router.get("/terminals/{terminal_id}/transcript", response=TranscriptAt)
def transcript_at(request: HttpRequest, terminal_id: str) -> TranscriptAt:
    """Where its recorder goes on from (after an agent's restart too)."""
    raw, size = transcripts.position(placed_terminal(request, terminal_id))
    return TranscriptAt(raw=raw, size=size)


@router.post("/terminals/{terminal_id}/transcript", response=TranscriptAt)
def transcript_append(
    request: HttpRequest, terminal_id: str, chunk: TranscriptChunk
) -> TranscriptAt:
    """A chunk of the masked transcript, appended where it says it goes; 409
    `transcript_moved` (with where it is) for one sent twice or out of turn."""
    term = placed_terminal(request, terminal_id)
    try:
        data = base64.b64decode(chunk.data, validate=True)
    except (binascii.Error, ValueError):
        raise Invalid("`data` is not base64.", {"field": "data"}) from None
    try:
        raw, size = transcripts.append(term, data, chunk.size, chunk.raw)
    except transcripts.Moved as moved:
        raise Conflict(
            f"{moved}: send from there.",
            {"raw": moved.raw, "size": moved.size},
            code="transcript_moved",
        ) from None
    return TranscriptAt(raw=raw, size=size)


def logged_exec(request: HttpRequest, exec_id: str) -> str:
    """An exec of a session placed on the asking host, in any state (its end frame may be
    read after a restart of the agent)."""
    host: Host = request.auth  # type: ignore[attr-defined]
    if not Exec.objects.filter(public_id=exec_id, session__runner_host=host.name).exists():
        raise NotFound(f"No exec {exec_id} is of a session on host {host.name}.")
    return exec_id


intake.add_doors(router, "execs", logged_exec)


def _host(request: HttpRequest) -> str:
    host: Host = request.auth  # type: ignore[attr-defined]
    return host.name


@router.post("/sessions/{session_id}/reads", response=dict[str, str | None])
def read_open(request: HttpRequest, session_id: str) -> dict[str, str | None]:
    """A read of a live session's files for the snapshots pending (`read`: its token,
    null when none is)."""
    return {"read": snapshot.open_read(placed_session(request, session_id))}


class ReadEntries(Schema):
    entries: list[dict[str, Any]]


@router.post("/reads/{token}/entries", response=dict[str, list[str] | None])
def read_entries(request: HttpRequest, token: str, body: ReadEntries) -> dict[str, Any]:
    """A manifest answer of the exec channel: the folders to list next (`folders`: null
    once the read ended here, past the caps or the bound)."""
    return {"folders": snapshot.take_entries(token, _host(request), body.entries)}


@router.get("/reads/{token}/wanted", response=dict[str, list[str]])
def read_wanted(request: HttpRequest, token: str) -> dict[str, list[str]]:
    """The files whose content the web host's store does not hold: to be read."""
    return {"paths": snapshot.wanted(token, _host(request))}


class ReadFiles(Schema):
    files: list[dict[str, Any]]


@router.post("/reads/{token}/contents", response=dict[str, bool])
def read_contents(request: HttpRequest, token: str, body: ReadFiles) -> dict[str, bool]:
    """Files the exec channel read (`taken`: false once the read ended here)."""
    return {"taken": snapshot.take_contents(token, _host(request), body.files)}


class ReadEnd(Schema):
    error: str = ""  # the agent's: the exec channel did not answer
    unanswered: bool = False


@router.post("/reads/{token}/finish", response=dict[str, bool])
def read_finish(request: HttpRequest, token: str, body: ReadEnd) -> dict[str, bool]:
    """The read's tree written and recorded, or its failure as the agent saw it."""
    snapshot.finish(token, _host(request), body.error[:500], body.unanswered)
    return {"done": True}
