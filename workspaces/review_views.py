"""The contract review pages: what waits, and one review's before/after table with
approve and reject, and revoke for an approved one. Deciding exists only here, behind a
session and CSRF: a bearer token is not a session, so these views never see a token's
actor."""

from typing import Any

from django.contrib import messages
from django.contrib.auth.models import User
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from accounts.access import Actor
from accounts.models import Membership
from core.errors import BerthError, NotFound
from workspaces import contract, review_lapses, reviews
from workspaces.models import ContractReview, ReviewState, Workspace
from workspaces.review_access import access_review
from workspaces.views import urls_of, workspace_page

LABELS = {
    "image": "Image",
    "runtime": "Runtime",
    "cpus": "CPUs",
    "memory_mb": "Memory (MB)",
    "disk_mb": "Disk (MB)",
    "timeout_s": "Timeout (s)",
    "egress": "Egress",
}


def _actor(request: HttpRequest) -> Actor:
    assert isinstance(request.user, User)  # behind workspace_page: signed in
    return Actor(request.user)


def _review(request: HttpRequest, workspace: Workspace, review_id: str) -> ContractReview:
    try:
        review = access_review(_actor(request), review_id)
    except NotFound as e:
        raise Http404(e.message) from e
    if review.workspace_id != workspace.pk:
        raise Http404("No such contract review.")
    return review


def rows(review: ContractReview) -> list[dict[str, Any]]:
    """Every key of the contract, before (the approved one it was compared with) and
    after, the widened ones marked with why."""
    before = review.baseline or contract.default_values()
    why = {w["key"]: w for w in review.widened}
    return [
        {
            "key": key,
            "label": label,
            "before": before.get(key),
            "after": review.values.get(key),
            "widened": why.get(key),
        }
        for key, label in LABELS.items()
    ]


def _page(membership: Membership, workspace: Workspace, request: HttpRequest, **ctx: Any) -> dict:
    return {
        "membership": membership,
        "workspace": workspace,
        "urls": urls_of(workspace),
        "tab": "reviews",
        "clone_url": workspace.git_url,
        **ctx,
    }


@workspace_page
def reviews_page(
    request: HttpRequest, membership: Membership, workspace: Workspace
) -> HttpResponse:
    found = ContractReview.objects.filter(workspace=workspace).select_related(
        "requested_by", "token", "decided_by"
    )
    return render(
        request,
        "workspaces/contract_reviews.html",
        _page(
            membership,
            workspace,
            request,
            pending=[r for r in found if r.state == ReviewState.PENDING],
            decided=[r for r in found if r.state != ReviewState.PENDING][:50],
        ),
    )


@workspace_page
def review_page(
    request: HttpRequest, membership: Membership, workspace: Workspace, review_id: str
) -> HttpResponse:
    review = _review(request, workspace, review_id)
    own = review.is_own(membership.user)
    return render(
        request,
        "workspaces/contract_review.html",
        _page(
            membership,
            workspace,
            request,
            review=review,
            rows=rows(review),
            runs=list(review.runs.order_by("-queued_at")[:20]),
            approvals=list(review.approvals.select_related("user")),
            own=own,
            can_review=membership.can_review and (not own or workspace.team.allow_self_approval),
        ),
    )


@require_POST
@workspace_page
def decide(
    request: HttpRequest,
    membership: Membership,
    workspace: Workspace,
    review_id: str,
    action: str,
) -> HttpResponse:
    """Approve, reject or revoke, as the signed-in person; the action checks the rules."""
    review = _review(request, workspace, review_id)
    note = request.POST.get("note", "")
    try:
        if action == "approve":
            reviews.approve(review, _actor(request), note, request.POST.get("confirm_own") == "yes")
            messages.success(request, "Approved: what asked for this contract can run now.")
        elif action == "reject":
            reviews.reject(review, _actor(request), note)
            messages.success(request, "Rejected: asks for this contract stay refused.")
        elif action == "revoke":
            review_lapses.revoke(review, _actor(request), note)
            messages.success(
                request,
                "Revoked: asks for this contract wait for a review again, and what ran "
                "under it that today's approved contract does not cover is being stopped.",
            )
        else:
            raise Http404("No such action.")
    except BerthError as e:
        messages.error(request, e.message)
        return redirect(review.url, status=303)
    return redirect(review.url)
