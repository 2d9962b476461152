"""JSON API doors onto a session's terminals (thin: access, then an action). The bytes
themselves go over the WebSocket each answer names (sessions/terminal_consumer.py)."""

from django.http import HttpRequest, HttpResponse
from ninja import Router, Status
from pydantic import Field

from accounts.schemas import RequestedBy
from core.links import absolute, websocket
from core.schemas import Out, Timestamp, answers
from sessions import terminals
from sessions.access import access_session, access_terminal
from sessions.models import Terminal
from sessions.transcripts import TRANSCRIPT_MAX, read_transcript
from workspaces.api import actor_of

router = Router(tags=["sessions"])


class TerminalOut(Out):
    """A terminal: a shell in a session's sandbox, and where to talk to it."""

    id: str
    session: str
    name: str
    state: str = Field(description="open, exited (its shell ended) or closed")
    reason: str | None
    exit_code: int | None
    socket: str = Field(
        description="the WebSocket's URL: send {type: input, data} and {type: resize, cols, "
        "rows}; receive output (base64) with `end`, and reconnect with ?after=<end>"
    )
    transcript: str = Field(description="its output so far, masked, as text")
    requested_by: RequestedBy
    created_at: Timestamp
    ended_at: Timestamp | None

    @classmethod
    def of(cls, term: Terminal) -> "TerminalOut":
        return cls(
            id=term.public_id,
            session=term.session.public_id,
            name=term.name,
            state=term.state,
            reason=term.reason or None,
            exit_code=term.exit_code,
            socket=websocket(f"/ws/terminals/{term.public_id}"),
            transcript=absolute(f"/api/v1/terminals/{term.public_id}/transcript"),
            requested_by=RequestedBy.of(term.opened_by, term.token),
            created_at=term.created_at.isoformat(),
            ended_at=term.ended_at.isoformat() if term.ended_at else None,
        )


@router.post(
    "/sessions/{session_id}/terminals",
    response=answers(TerminalOut, 403, 404, 409, 422, status=201),
    summary="Open a terminal in a session (a frozen one resumes for it)",
)
def open_terminal(request: HttpRequest, session_id: str) -> Status:
    actor = actor_of(request)
    term = terminals.open_terminal(access_session(actor, session_id), actor)
    return Status(201, TerminalOut.of(term))


@router.get(
    "/sessions/{session_id}/terminals",
    response=answers(list[TerminalOut], 403, 404, 422),
    summary="A session's terminals, oldest first",
)
def list_terminals(request: HttpRequest, session_id: str) -> list[TerminalOut]:
    session = access_session(actor_of(request), session_id)
    rows = session.terminals.select_related("session", "opened_by", "token")
    return [TerminalOut.of(t) for t in rows]


@router.get(
    "/terminals/{terminal_id}",
    response=answers(TerminalOut, 403, 404, 422),
    summary="One terminal",
)
def get_terminal(request: HttpRequest, terminal_id: str) -> TerminalOut:
    return TerminalOut.of(access_terminal(actor_of(request), terminal_id))


@router.get(
    "/terminals/{terminal_id}/transcript",
    response=answers(None, 403, 404, 422),
    summary=f"Its output so far (masked, at most {TRANSCRIPT_MAX >> 20} MiB), as text",
)
def transcript(request: HttpRequest, terminal_id: str) -> HttpResponse:
    term = access_terminal(actor_of(request), terminal_id)
    return HttpResponse(read_transcript(term), content_type="text/plain; charset=utf-8")


@router.delete(
    "/terminals/{terminal_id}",
    response=answers(TerminalOut, 403, 404, 409, 422, status=202),
    summary="Close a terminal: its shell is hung up; its transcript stays",
)
def close_terminal(request: HttpRequest, terminal_id: str) -> Status:
    actor = actor_of(request)
    term = terminals.close_terminal(access_terminal(actor, terminal_id), actor)
    return Status(202, TerminalOut.of(term))
