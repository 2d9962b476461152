"""Approvals that lapse (docs/security.md 29): superseded by a reviewer's narrower
contract (workspaces.reviews calls `supersede_wider`), or revoked on the review page.
A lapsed review stays as history and decides nothing; `contract_lapsed` tells the apps
above to stop what still runs under it and is no longer admitted (runs.lapses)."""

import logging

from django.db import transaction

from accounts.access import Actor, human_reviewer
from accounts.actions import record
from core.errors import Conflict
from workspaces import contract
from workspaces.models import ContractReview, ReviewState, Workspace
from workspaces.signals import contract_lapsed

log = logging.getLogger(__name__)


def supersede_wider(review: ContractReview, actor: Actor) -> list[ContractReview]:
    """Every other approval of the workspace that lets a sandbox do something `review`
    does not (`widenings(review, other)` not empty) lapses; what still runs under one
    and is no longer admitted is stopped (contract_lapsed)."""
    workspace = review.workspace
    lapsed = []
    others = ContractReview.objects.filter(workspace=workspace, state=ReviewState.APPROVED)
    for other in others.exclude(pk=review.pk):
        if contract.widenings(review.values, other.values, []) and other.lapse(
            ReviewState.SUPERSEDED,
            actor.user,
            f"Wider than {review.public_id}, the contract "
            f"{review.requested_by or 'a reviewer'} typed in the editor.",
        ):
            lapsed.append(other)
    if lapsed:
        record(
            workspace.team,
            actor,
            "contract.superseded",
            f"contract-review:{review.public_id}",
            workspace.slug,
            superseded=[r.public_id for r in lapsed],
        )
        _announce_lapsed(workspace, lapsed, actor)
    return lapsed


def revoke(review: ContractReview, actor: Actor, note: str = "") -> ContractReview:
    """A reviewer or admin takes an approval back: asks for its contract are held for
    review again, and what still runs under it and is no longer admitted is stopped."""
    human_reviewer(
        actor,
        review.workspace.team,
        "revoke a sandbox contract",
        f"Only a signed-in person may revoke a sandbox contract: open {review.url} in "
        "Berth. API tokens and MCP can read a review, never decide it.",
        {"review": review.public_id},
        "No such contract review.",
    )
    with transaction.atomic():
        others = ContractReview.objects.select_for_update().filter(
            workspace=review.workspace, state=ReviewState.APPROVED
        )
        if review.state == ReviewState.APPROVED and not others.exclude(pk=review.pk).exists():
            # With no approval left, asks are compared with Berth's defaults, which may
            # be wider than this one (runc, more memory): revoking must never widen.
            raise Conflict(
                "This is the workspace's only approved contract: without it, asks would "
                "be compared with Berth's defaults, which may allow more. To take access "
                "back, type a narrower workspace.toml in the editor: a reviewer's "
                "narrower contract becomes the baseline and wider approvals lapse.",
                {"state": review.state},
                code="last_approval",
            )
        if not review.lapse(ReviewState.REVOKED, actor.user, note.strip()[:5000]):
            review.refresh_from_db()
            raise Conflict(
                f"Only an approved contract can be revoked; this one is {review.state}.",
                {"state": review.state},
            )
        record(
            review.workspace.team,
            actor,
            "contract.revoked",
            f"contract-review:{review.public_id}",
            review.workspace.slug,
            note=review.lapse_note[:200],
        )
        _announce_lapsed(review.workspace, [review], actor)
    return review


def _announce_lapsed(workspace: Workspace, lapsed: list[ContractReview], actor: Actor) -> None:
    ids = [r.pk for r in lapsed]
    transaction.on_commit(lambda: _send_lapsed(workspace, ids, actor.label))


def _send_lapsed(workspace: Workspace, ids: list[int], who: str) -> None:
    """Every app's receiver runs, whatever another's failure (the engine down); a
    failure is logged, not raised into the request that already committed the lapse."""
    sent = contract_lapsed.send_robust(Workspace, workspace=workspace, review_ids=ids, who=who)
    for receiver, result in sent:
        if isinstance(result, Exception):
            log.error("%s failed on lapsed approvals %s: %r", receiver, ids, result)
