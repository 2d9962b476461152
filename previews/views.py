"""The app's doors onto previews: open one (access check, then a ticket for the
preview host), its page (state, frame, log, stop/restart), start one from a workspace.

Thin doors: access through `access_preview` / `workspace_page`, changes through
`previews.actions`, so a page obeys the API's rules and writes the same Activity.
"""

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.clickjacking import xframe_options_sameorigin
from django.views.decorators.http import require_POST

from accounts.access import Actor, require_team_admin
from accounts.models import Membership
from core.errors import BerthError, NotFound
from logs import logstore
from previews import actions, of_sessions, viewers
from previews.access import access_preview, managed_preview
from previews.links import ticket_url
from previews.models import Preview
from previews.schemas import PreviewOut
from sessions.access import access_session
from sessions.views import session_urls
from workspaces.models import Workspace
from workspaces.views import urls_of, workspace_page


def _actor(request: HttpRequest) -> Actor:
    assert isinstance(request.user, User)  # every view here is behind login_required
    return Actor(request.user)


def _preview(request: HttpRequest, preview_id: str) -> Preview:
    try:
        return access_preview(_actor(request), preview_id)
    except NotFound as e:
        raise Http404(e.message) from e


@login_required
@xframe_options_sameorigin  # the workspace page frames this redirect to the preview host
def open_preview(request: HttpRequest, preview_id: str) -> HttpResponse:
    """Check access, then send the browser to the preview host with a single-use
    ticket; the host swaps it for its own cookie and goes on to `next`."""
    preview = _preview(request, preview_id)
    url, _ = ticket_url(preview, _actor(request), request.get_port(), request.GET.get("next", "/"))
    response = redirect(url)
    response["Cache-Control"] = "no-store"
    response["Referrer-Policy"] = "no-referrer"  # the ticket stays out of Referer
    return response


@login_required
def preview_page(request: HttpRequest, preview_id: str) -> HttpResponse:
    preview = _preview(request, preview_id)
    if request.GET.get("pane"):
        template = "previews/_pane.html"  # the workspace page's pane, loaded on opening
    elif request.headers.get("HX-Request"):
        template = "previews/_status.html"  # the status refreshing itself
    else:
        template = "previews/preview.html"
    return render(request, template, context(request, preview))


def context(request: HttpRequest, preview: Preview) -> dict[str, Any]:
    workspace = preview.workspace
    membership = Membership.objects.filter(team=workspace.team, user=_actor(request).user).first()
    run = preview.run
    return {
        "preview": preview,
        "workspace": workspace,
        "membership": membership,
        "urls": urls_of(workspace),
        "tab": "previews",
        "clone_url": workspace.git_url,
        "summary": PreviewOut.of(preview, request.get_port()),
        "ws_path": f"/ws/previews/{preview.public_id}/logs",
        "log_start": max(0, logstore.count(run.public_id) - 20_000) if run else 0,
    }


@login_required
@require_POST
def act(request: HttpRequest, preview_id: str, action: str) -> HttpResponse:
    preview = _preview(request, preview_id)
    actor = _actor(request)
    try:
        managed_preview(actor, preview.public_id)
        if action == "stop":
            actions.stop_preview(preview, actor)
        elif action == "restart":
            actions.restart_preview(preview, actor)
        elif action == "public":
            require_team_admin(actor, preview.workspace.team)
            viewers.set_public(preview, actor, request.POST.get("public") == "1")
        else:
            raise Http404("No such action.")
    except BerthError as e:
        messages.error(request, e.message)
    return redirect("preview", preview_id=preview.public_id)


@workspace_page
@require_POST
def start(request: HttpRequest, membership: Membership, workspace: Workspace) -> HttpResponse:
    try:
        preview = actions.start_preview(
            workspace,
            Actor(membership.user),
            request.POST.get("ref") or None,
            request.POST.get("follow") == "1",
        )
    except BerthError as e:
        messages.error(request, e.message)
        return redirect("workspace", membership.team.slug, workspace.slug)
    return redirect("preview", preview_id=preview.public_id)


@login_required
@require_POST
def preview_of_session(request: HttpRequest, session_id: str) -> HttpResponse:
    """The session page's form: preview what listens on a port in the session."""
    actor = _actor(request)
    try:
        session = access_session(actor, session_id, scope="preview")
    except NotFound as e:
        raise Http404(e.message) from e
    back = session_urls(session)["page"]
    port = request.POST.get("port", "")
    if not port.isdigit():
        messages.error(request, "Give the port the app listens on in the session (1-65535).")
        return redirect(back)
    try:
        preview = of_sessions.preview_session(
            session, actor, int(port), request.POST.get("health_path") or None
        )
    except BerthError as e:
        messages.error(request, e.message)
        return redirect(back)
    return redirect("preview", preview_id=preview.public_id)
