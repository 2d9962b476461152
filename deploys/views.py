"""The deploy pages: the list (what is live, what waits, rollback) and the review page
(what would ship, the runs on that commit, its preview; approve or reject). Approve,
reject and rollback exist only here, behind a session and CSRF: a token cannot reach
them (a bearer token is not a session, so these views see an anonymous user)."""

from datetime import UTC, datetime
from typing import Any

from django.contrib import messages
from django.contrib.auth.models import User
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_POST

from accounts.access import Actor
from accounts.models import Membership
from core.errors import BerthError, NotFound
from deploys import actions
from deploys.access import access_deploy
from deploys.models import IN_FLIGHT, PENDING, DeployRequest, Release, Route
from deploys.schemas import DeployOut
from previews.models import LIVE_STATES, Preview
from runs.models import Purpose, Run, RunState
from workspaces import history
from workspaces.history_views import diff_lines
from workspaces.models import Workspace
from workspaces.store import open_store
from workspaces.views import is_htmx, urls_of, workspace_page


def _actor(request: HttpRequest) -> Actor:
    assert isinstance(request.user, User)  # behind workspace_page: signed in
    return Actor(request.user)


def _deploy(request: HttpRequest, workspace: Workspace, deploy_id: str) -> DeployRequest:
    try:
        deploy = access_deploy(_actor(request), deploy_id)
    except NotFound as e:
        raise Http404(e.message) from e
    if deploy.workspace_id != workspace.pk:
        raise Http404("No such deploy.")
    return deploy


def _page(
    membership: Membership, workspace: Workspace, request: HttpRequest, **ctx: Any
) -> dict[str, Any]:
    return {
        "membership": membership,
        "workspace": workspace,
        "urls": urls_of(workspace),
        "tab": "deploys",
        "clone_url": workspace.git_url,
        "release_url": actions.release_url(workspace, request.get_port()),
        **ctx,
    }


@workspace_page
def deploys_page(
    request: HttpRequest, membership: Membership, workspace: Workspace
) -> HttpResponse:
    route = Route.objects.select_related("release__request").filter(workspace=workspace).first()
    deploys = DeployRequest.objects.filter(workspace=workspace).select_related(
        "requested_by", "token"
    )[:100]
    releases = Release.objects.filter(workspace=workspace).exclude(live_at=None)[:20]
    return render(
        request,
        "deploys/deploys.html",
        _page(
            membership,
            workspace,
            request,
            route=route,
            deploys=deploys,
            releases=releases,
            pending=[d for d in deploys if d.state in PENDING],
            can_review=membership.can_review,
        ),
    )


@workspace_page
def review_page(
    request: HttpRequest, membership: Membership, workspace: Workspace, deploy_id: str
) -> HttpResponse:
    deploy = _deploy(request, workspace, deploy_id)
    route = Route.objects.select_related("release").filter(workspace=workspace).first()
    # Once its release went live, the live commit is its own: what it shipped is the
    # difference from the release live before it.
    shipped = deploy.releases.filter(rollback_of=None, live_at__isnull=False).first()
    before = shipped.live_before() if shipped else None
    if shipped is not None:
        base = before.commit if before else None
    else:
        base = route.release.commit if route else None
    with open_store(workspace) as store:
        new_tree = store.commit(deploy.commit).tree
        diff = history.diff_trees(store, store.commit(base).tree if base else None, new_tree)
        summary = history.commit_summary(store, deploy.commit)
    for f in diff["files"]:
        f["rows"] = diff_lines(f["patch"])
    runs = list(
        Run.objects.filter(workspace=workspace, commit=deploy.commit, purpose=Purpose.RUN).order_by(
            "-queued_at"
        )[:10]
    )
    preview = Preview.objects.filter(
        workspace=workspace, commit=deploy.commit, kind="preview", state__in=LIVE_STATES
    ).first()
    summary["when"] = datetime.fromtimestamp(summary["authored_at"], tz=UTC)
    # htmx: what a move changes, asked for again at each move of the deploy (its socket).
    template = "deploys/review.html#deploy-moves" if is_htmx(request) else "deploys/review.html"
    response = render(
        request,
        template,
        _page(
            membership,
            workspace,
            request,
            deploy=deploy,
            diff=diff,
            base=base,
            shipped=shipped,
            before=before,
            route=route,
            runs=runs,
            # A cancelled run says nothing about the commit: not among the failures.
            failed_runs=[
                r
                for r in runs
                if r.state not in (RunState.SUCCEEDED, RunState.CANCELLED) and not r.is_active
            ],
            cancelled_runs=[r for r in runs if r.state == RunState.CANCELLED],
            preview=preview,
            c=summary,
            summary=DeployOut.of(deploy),
            approvals=list(deploy.approvals.select_related("user")),
            can_review=membership.can_review
            and (
                deploy.requested_by_id != membership.user_id or workspace.team.allow_self_approval
            ),
            own=deploy.requested_by_id == membership.user_id,
            in_flight=IN_FLIGHT,
        ),
    )
    patch_vary_headers(response, ["HX-Request"])
    return response


def _back(workspace: Workspace, deploy: DeployRequest) -> str:
    return reverse("workspace-deploy", args=[workspace.team.slug, workspace.slug, deploy.public_id])


@require_POST
@workspace_page
def decide(
    request: HttpRequest, membership: Membership, workspace: Workspace, deploy_id: str, action: str
) -> HttpResponse:
    """Approve, reject or cancel, as the signed-in person; the action checks the rules."""
    deploy = _deploy(request, workspace, deploy_id)
    actor = _actor(request)
    try:
        if action == "approve":
            actions.approve_deploy(
                deploy,
                actor,
                request.POST.get("confirm") == "yes",
                request.POST.get("confirm_own") == "yes",
            )
            messages.success(
                request, f"Approved: the release is being built from {deploy.commit[:12]}."
            )
        elif action == "reject":
            actions.reject_deploy(deploy, actor, request.POST.get("reason", ""))
            messages.success(request, "Rejected; the requester sees your reason.")
        elif action == "cancel":
            actions.cancel_deploy(deploy, actor)
            messages.success(request, "Cancelled.")
        else:
            raise Http404("No such action.")
    except BerthError as e:
        messages.error(request, e.message)
        return redirect(_back(workspace, deploy), status=303)
    return redirect(_back(workspace, deploy))


@require_POST
@workspace_page
def ask(request: HttpRequest, membership: Membership, workspace: Workspace) -> HttpResponse:
    """A member asks for a deploy from the page (agents use the API or MCP)."""
    try:
        deploy = actions.request_deploy(
            workspace,
            _actor(request),
            request.POST.get("ref") or None,
            request.POST.get("note", ""),
        )
    except BerthError as e:
        messages.error(request, e.message)
        return redirect("workspace-deploys", team=workspace.team.slug, slug=workspace.slug)
    messages.success(
        request,
        f"Deploy of {deploy.commit[:12]} requested; a reviewer other than you approves it here.",
    )
    return redirect(_back(workspace, deploy))


@require_POST
@workspace_page
def visibility(request: HttpRequest, membership: Membership, workspace: Workspace) -> HttpResponse:
    if not membership.is_admin:
        return render(
            request,
            "error.html",
            {"message": "Only an admin of the team may change who sees releases."},
            status=403,
        )
    team_only = request.POST.get("team_only") == "on"
    actions.set_release_visibility(workspace, _actor(request), team_only)
    messages.success(
        request,
        "Releases of this workspace are now visible to the team only."
        if team_only
        else "Releases of this workspace are now public.",
    )
    return redirect("workspace-settings", team=workspace.team.slug, slug=workspace.slug)


@require_POST
@workspace_page
def rollback(
    request: HttpRequest, membership: Membership, workspace: Workspace, number: int
) -> HttpResponse:
    try:
        release = actions.rollback(workspace, _actor(request), number)
    except BerthError as e:
        messages.error(request, e.message)
    else:
        messages.success(
            request,
            f"Rolling back to release {number} (as release "
            f"{release.number}); it serves once healthy.",
        )
    return redirect("workspace-deploys", team=workspace.team.slug, slug=workspace.slug)
