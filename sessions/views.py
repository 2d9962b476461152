"""The session pages: a workspace's sessions (open one, see them), one session with its
clocks, what survives, its execs and their live output; and the team's session maxima
(on the members page, beside the other team policies).

Thin doors: access through `workspace_page` and `access_session`, changes through
`sessions.actions` and `sessions.policy`, so a page obeys the API's rules and writes the
same Activity rows. The words a page shows about a session are its contract's
(`SessionOut`): the same an agent reads.
"""

from datetime import datetime
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_POST
from django_htmx.http import reswap, retarget, trigger_client_event

from accounts.access import Actor
from accounts.models import Membership, Role
from accounts.views import team_page
from core.errors import BerthError, Conflict, NotFound
from runs.durations import took
from sessions import actions, policy
from sessions.access import access_exec, access_session
from sessions.forms import PolicyForm, SessionForm
from sessions.models import (
    LIVE_STATES,
    RESTARTABLE_STATES,
    Exec,
    Session,
    SessionPolicy,
    SessionState,
    Terminal,
    TerminalState,
)
from sessions.schemas import ExecOut, SessionOut
from workspaces.models import Workspace
from workspaces.store import open_store
from workspaces.views import is_htmx, urls_of, workspace_page

RECENT_SESSIONS = 50
RECENT_EXECS = 20
VIEW_LINES = 20_000  # as the run page: the viewer keeps this many (runs.js)
# The rows of the persistence statement, in its order, named for a person; the words
# of each row are the statement's own (sessions.persistence).
PERSISTENCE_ROWS = {
    "commits": "Commits",
    "uncommitted_files": "Uncommitted files",
    "dependency_cache": "Dependency cache",
    "home_and_tmp": "Installs in $HOME and /tmp",
    "processes_and_memory": "Running processes and memory",
}
ACTIONS = ("keep-alive", "stop", "start", "delete")
# What to expect in a state that carries no message of its own (a stop, a failure and
# a deletion say theirs).
WAITING = {
    SessionState.STARTING: "Starting: the sandbox is being prepared with the branch's files "
    "(and [setup], when its cache misses). A command sent now runs once it is ready.",
    SessionState.READY: "Ready: each command runs at once in this same sandbox.",
    SessionState.FREEZING: "Freezing after its idle time: its processes are being paused.",
    SessionState.FROZEN: "Frozen (paused) after its idle time: its processes and memory are "
    "kept. A command or Keep alive resumes it.",
    SessionState.STOPPING: "Stopping: its container goes; its files stay on its volume.",
}


def page_context(
    request: HttpRequest, membership: Membership, workspace: Workspace
) -> dict[str, Any]:
    return {
        "membership": membership,
        "workspace": workspace,
        "urls": urls_of(workspace),
        "tab": "sessions",
        "clone_url": workspace.git_url,
    }


def session_urls(session: Session) -> dict[str, str]:
    workspace = session.workspace
    args = [workspace.team.slug, workspace.slug, session.public_id]
    urls = {
        "page": reverse("workspace-session", args=args),
        "exec": reverse("workspace-session-exec", args=args),
    }
    for action in ACTIONS:
        urls[action.replace("-", "_")] = reverse("workspace-session-act", args=[*args, action])
    return urls


def _at(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def session_context(session: Session, error: str = "") -> dict[str, Any]:
    """What the session's status shows: its state, clocks and what survives, and the
    buttons its state allows."""
    summary = SessionOut.of(session)
    times = summary.times
    statement = summary.persistence.model_dump()
    return {
        "session": session,
        "summary": summary,
        "session_urls": session_urls(session),
        "clocks": [
            ("Freezes at", _at(times.freezes_at), "if nothing happens before (while ready)"),
            ("Stops at", _at(times.stops_at), "idle stop or lifetime, the earlier (while live)"),
            ("Deleted after", _at(times.deleted_after), "a stopped session's files go then"),
        ],
        "instants": [
            (label, _at(value))
            for label, value in (
                ("Opened", times.created_at),
                ("Started", times.started_at),
                ("Ready", times.ready_at),
                ("Last active", times.last_active_at),
                ("Frozen", times.frozen_at),
                ("Stopped", times.stopped_at),
                ("Deleted", times.deleted_at),
            )
            if value
        ],
        "persistence": [(key, label, statement[key]) for key, label in PERSISTENCE_ROWS.items()],
        "can_keep_alive": session.state in LIVE_STATES and session.state != SessionState.STOPPING,
        "can_stop": session.state in LIVE_STATES and session.state != SessionState.STOPPING,
        "can_start": session.state in RESTARTABLE_STATES,
        "can_delete": not session.is_deleted,
        "waiting": WAITING.get(SessionState(session.state), ""),
        "action_error": error,
    }


def exec_context(row: Exec, session: Session) -> dict[str, Any]:
    """One exec as the session page lists it: an ended one with its last lines, an
    active one with a live viewer on its log (the run's WebSocket door)."""
    out = ExecOut.of(row, with_output=not row.is_active)
    args = [session.workspace.team.slug, session.workspace.slug, session.public_id]
    return {
        "exec": out,
        "live": row.is_active,
        "ws_path": f"/ws/execs/{row.public_id}/logs",
        "log_start": max(0, out.log_entries - VIEW_LINES),
        "status_url": reverse("workspace-session-exec-item", args=[*args, row.public_id]),
        "took": took(row.started_at, row.ended_at) if row.ended_at else "",
    }


def session_of(
    membership: Membership, workspace: Workspace, session_id: str, use: bool = False
) -> Session:
    """The session through the one access helper (`use` as the API's door for the same
    action), and only under its own workspace."""
    try:
        session = access_session(Actor(membership.user), session_id, use=use)
    except NotFound as e:
        raise Http404(e.message) from e
    if session.workspace_id != workspace.pk:
        raise Http404("No such session.")
    session.workspace = workspace
    return session


# -- a workspace's sessions ------------------------------------------------------------


@workspace_page
def sessions_page(
    request: HttpRequest, membership: Membership, workspace: Workspace
) -> HttpResponse:
    """GET: the form and the sessions. POST: open one, then its page."""
    with open_store(workspace) as store:
        branches = sorted(store.branches())
    form = SessionForm(branches, request.POST or None, initial={"ref": workspace.default_branch})
    status = 200
    if request.method == "POST" and form.is_valid():
        try:
            session = actions.open_session(
                workspace,
                Actor(membership.user),
                form.cleaned_data["ref"] or None,
                form.cleaned_data["runtime"] or None,
            )
        except BerthError as e:
            field = e.details.get("field")
            form.add_error(field if field in SessionForm.base_fields else None, e.message)
            status = e.status
        else:
            return redirect(session_urls(session)["page"])
    rows = Session.objects.filter(workspace=workspace).select_related(
        "workspace__team", "run", "requested_by", "token"
    )
    sessions = [
        {"session": s, "url": session_urls(s)["page"], "summary": SessionOut.of(s)}
        for s in rows.order_by("-pk")[:RECENT_SESSIONS]
    ]
    ctx = {
        **page_context(request, membership, workspace),
        "form": form,
        "sessions": sessions,
        "branches": [],  # the header's branch switcher has no use here
        "policy": SessionPolicy.of(workspace.team),
        "live": policy.live_sessions(workspace.team),
    }
    if form.errors and status == 200:
        status = 422
    return render(request, "sessions/sessions.html", ctx, status=status)


# -- one session -----------------------------------------------------------------------


@workspace_page
def session_page(
    request: HttpRequest, membership: Membership, workspace: Workspace, session_id: str
) -> HttpResponse:
    """The session; for htmx (its state changed, an exec touched it) only its status."""
    session = session_of(membership, workspace, session_id)
    if is_htmx(request):
        return _vary(render(request, "sessions/session.html#status", session_context(session)))
    execs = Exec.objects.filter(session=session).select_related("session", "requested_by", "token")[
        :RECENT_EXECS
    ]
    open_terminals = list(
        Terminal.objects.filter(session=session, run=session.run, state=TerminalState.OPEN)
    )
    chosen = request.GET.get("terminal")
    ctx = {
        **page_context(request, membership, workspace),
        **session_context(session),
        "execs": [exec_context(row, session) for row in execs],
        "state_ws": f"/ws/sessions/{session.public_id}",
        "terminals": open_terminals,
        "can_terminal": session.is_live and session.state != SessionState.STOPPING,
        "terminal_chosen": chosen
        if any(t.public_id == chosen for t in open_terminals)
        else (open_terminals[-1].public_id if open_terminals else ""),
        "terminal_url": reverse(
            "workspace-session-terminal",
            args=[workspace.team.slug, workspace.slug, session.public_id],
        ),
    }
    return _vary(render(request, "sessions/session.html", ctx))


@require_POST
@workspace_page
def exec_command(
    request: HttpRequest, membership: Membership, workspace: Workspace, session_id: str
) -> HttpResponse:
    """Run a command in the session; for htmx the exec's item (its output live), else
    the session's page."""
    actor = Actor(membership.user)
    session = session_of(membership, workspace, session_id, use=True)
    try:
        row = actions.exec_in(session, actor, request.POST.get("command", ""))
    except BerthError as e:
        if not is_htmx(request):
            messages.error(request, e.message)
            return redirect(session_urls(session)["page"])
        response = render(request, "sessions/session.html#exec-error", {"message": e.message})
        response.status_code = e.status
        return _vary(reswap(retarget(response, "#exec-error"), "innerHTML"))
    if not is_htmx(request):
        return redirect(session_urls(session)["page"])
    row = Exec.objects.select_related("session", "requested_by", "token").get(pk=row.pk)
    response = render(request, "sessions/session.html#exec", {"e": exec_context(row, session)})
    response.status_code = 201
    # The exec was activity: the page asks for the session's clocks again.
    return _vary(trigger_client_event(response, "session-touched"))


@workspace_page
def exec_item(
    request: HttpRequest,
    membership: Membership,
    workspace: Workspace,
    session_id: str,
    exec_id: str,
) -> HttpResponse:
    """One exec's item again (its viewer asks at the exec's end: its reason and exit)."""
    session = session_of(membership, workspace, session_id)
    try:
        row = access_exec(Actor(membership.user), exec_id)
    except NotFound as e:
        raise Http404(e.message) from e
    if row.session_id != session.pk:
        raise Http404("No such exec.")
    if not is_htmx(request):
        return _vary(redirect(f"{session_urls(session)['page']}#exec-{row.public_id}"))
    ctx = {"e": exec_context(row, session)}
    return _vary(render(request, "sessions/session.html#exec-status", ctx))


@require_POST
@workspace_page
def act(
    request: HttpRequest,
    membership: Membership,
    workspace: Workspace,
    session_id: str,
    action: str,
) -> HttpResponse:
    """Keep alive, stop, start again, delete; for htmx the session's status after."""
    if action not in ACTIONS:
        raise Http404("No such action.")
    actor = Actor(membership.user)
    # Each is a use of the session (a stop ends its execs, a delete its files), as on
    # the API's doors (docs/security.md 35).
    session = session_of(membership, workspace, session_id, use=True)
    error = ""
    try:
        if action == "keep-alive":
            actions.keep_alive(session, actor)
        elif action == "stop":
            actions.stop_session(session, actor)
        elif action == "start":
            actions.start_again(session, actor)
        else:
            actions.delete_session(session, actor)
    except BerthError as e:
        error = e.message
        if not is_htmx(request):
            (messages.info if isinstance(e, Conflict) else messages.error)(request, e.message)
    session = session_of(membership, workspace, session_id)
    if is_htmx(request):
        ctx = session_context(session, error)
        return _vary(render(request, "sessions/session.html#status", ctx))
    return redirect(session_urls(session)["page"])


# -- the team's session maxima ---------------------------------------------------------


@require_POST
@team_page(Role.ADMIN)
def policy_page(request: HttpRequest, membership: Membership) -> HttpResponse:
    """An admin sets the team's maxima from the members page (its Team policies)."""
    form = PolicyForm(request.POST)
    if not form.is_valid():
        said = "; ".join(
            f"{name}: {' '.join(map(str, errors))}" for name, errors in form.errors.items()
        )
        messages.error(request, f"Session maxima not saved: {said}")
    else:
        try:
            chosen = policy.set_policy(membership.team, Actor(membership.user), form.cleaned_data)
        except BerthError as e:
            messages.error(request, f"Session maxima not saved: {e.message}")
        else:
            messages.success(
                request,
                f"Session maxima saved: at most {chosen['max_sessions']} live at once. "
                "Sessions opened from now on are held to them; open ones keep theirs.",
            )
    return redirect(reverse("members", args=[membership.team.slug]) + "#session-policy")


def _vary(response: HttpResponse) -> HttpResponse:
    patch_vary_headers(response, ["HX-Request"])
    return response
