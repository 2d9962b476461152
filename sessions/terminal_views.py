"""The page doors onto terminals: a new terminal in a session (its page's button), and
a terminal from the workspace page, which opens or reuses the branch's session. Both
answer with the session's page, the terminal selected; the bytes go over its
WebSocket (static/js/terminal.js)."""

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from accounts.access import Actor
from accounts.models import Membership
from core.errors import BerthError, error_body
from sessions import terminals
from sessions.models import Session, Terminal
from sessions.views import session_of, session_urls
from workspaces.models import Workspace
from workspaces.views import urls_of, workspace_page


def _to(session: Session, term: Terminal | None) -> HttpResponse:
    page = session_urls(session)["page"]
    return redirect(f"{page}?terminal={term.public_id}#terminals" if term else page)


@require_POST
@workspace_page
def new_terminal(
    request: HttpRequest, membership: Membership, workspace: Workspace, session_id: str
) -> HttpResponse:
    session = session_of(membership, workspace, session_id, use=True)
    try:
        term = terminals.open_terminal(session, Actor(membership.user))
    except BerthError as e:
        messages.error(request, e.message)
        return _to(session, None)
    return _to(session, term)


@require_POST
@workspace_page
def workspace_terminal(
    request: HttpRequest, membership: Membership, workspace: Workspace
) -> HttpResponse:
    """A terminal in the branch's session, opened or started again for it when needed."""
    actor = Actor(membership.user)
    ref = request.POST.get("ref") or workspace.default_branch
    # The page's side pane asks for JSON and draws the terminal itself; without
    # script the form goes to the session's page, the terminal selected.
    wants_json = "application/json" in request.headers.get("Accept", "")
    try:
        session = terminals.session_for_terminal(workspace, actor, ref)
        session = session_of(membership, workspace, session.public_id, use=True)
        term = terminals.open_terminal(session, actor)
    except BerthError as e:
        if wants_json:
            return JsonResponse(error_body(e.code, e.message, e.details), status=e.status)
        messages.error(request, f"No terminal: {e.message}")
        return redirect(urls_of(workspace)["page"])
    if wants_json:
        page = session_urls(session)["page"]
        return JsonResponse(
            {
                "id": term.public_id,
                "name": term.name,
                "socket": f"/ws/terminals/{term.public_id}",
                "session": session.public_id,
                "session_state": session.state,
                "page": f"{page}?terminal={term.public_id}#terminals",
            },
            status=201,
        )
    return _to(session, term)
