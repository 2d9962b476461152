"""A `workspace.toml` a reviewer or admin typed in the editor (`written_on_page`, the
page's save door only) is theirs: what they wrote is what they mean.

Narrower than the approved contract, it becomes the baseline at once and approvals
wider than it lapse (superseded: workspaces.review_lapses); wider, it is a review like
any other (workspaces.reviews), which their typing approves only where the team allows
self-approval, and which is approved with the team's N-th approver. A commit of
anything else (a session's files, an API write, a push) approves nothing.
"""

import contextlib
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.access import Actor
from accounts.actions import record
from accounts.models import Membership, Role
from core.errors import Conflict
from workspaces import config as workspace_config
from workspaces import contract
from workspaces.models import ContractReview, ReviewSource, ReviewState, Workspace
from workspaces.review_lapses import supersede_wider
from workspaces.reviews import approve, baseline_of, live_review


def written_on_page(
    workspace: Workspace,
    actor: Actor,
    commit: str,
    ref: str,
    text: str,
    before: str | None = None,
) -> ContractReview | None:
    """A `workspace.toml` a signed-in reviewer or admin typed in the editor and saved
    (edits.save, the only caller): what they wrote is what they mean.

    1. It widens nothing of the approved contract but narrows it: it is the new
       baseline at once (approved, nobody's approval needed to ask for less), and the
       approvals wider than it lapse (`supersede_wider`).
    2. It widens: its review is opened (or found) with the author as the asker. Their
       typing is their approval only where the team allows self-approval; it is
       approved with the team's N-th approver (`approve`), like any other.
    Anyone else's save (a member) is only held when something asks for it. The editor
    sends the whole file: where the file as it was opened (`before`) already widened
    the approved contract (an agent's write, say), a widening saved over it is not all
    the author's typing, and it is only held when something asks for it."""
    if not actor.is_human:
        return None
    membership = Membership.objects.filter(team=workspace.team_id, user=actor.user).first()
    if membership is None or not membership.has_role(Role.REVIEWER):
        return None
    try:
        values = contract.asked(workspace_config.parse(text))
    except workspace_config.ConfigError:
        return None  # runs of an invalid file are refused anyway
    digest = contract.content_hash(values)
    current, baseline = baseline_of(workspace)
    widened = contract.widenings(baseline, values, workspace.team.egress_ceiling)
    if not widened:
        if not contract.widenings(values, baseline, []):
            return current  # the same contract: nothing to decide
        return _narrowed(workspace, actor, values, digest, baseline, commit, ref)
    review = live_review(workspace, digest)
    if review is not None and review.state != ReviewState.PENDING:
        return review  # approved already, or rejected: a decision stands until reverted
    if _widened_already(workspace, before, baseline):
        return review
    with transaction.atomic():
        if review is None:
            try:
                with transaction.atomic():
                    review = _typed(
                        workspace,
                        actor,
                        values,
                        commit,
                        ref,
                        "typed in the editor",
                        state=ReviewState.PENDING,
                    )
            except IntegrityError:  # asked for at the same moment
                review = live_review(workspace, digest)
                assert review is not None
                if review.state != ReviewState.PENDING:
                    return review
            else:
                record(
                    workspace.team,
                    actor,
                    "contract.review_opened",
                    f"contract-review:{review.public_id}",
                    workspace.slug,
                    commit=commit,
                    asked_for="typed in the editor",
                )
        review.compare_with(baseline, [w.as_dict() for w in widened])
    if workspace.team.allow_self_approval and not review.approvals.filter(user=actor.user):
        # Decided meanwhile (a Conflict): the save stands either way.
        with contextlib.suppress(Conflict):
            approve(review, actor, "Typed in the editor by its author.", confirm_own=True)
        review.refresh_from_db()
    return review


def _narrowed(
    workspace: Workspace,
    actor: Actor,
    values: contract.Values,
    digest: str,
    baseline: contract.Values,
    commit: str,
    ref: str,
) -> ContractReview:
    """The reviewer's narrower contract as the workspace's baseline, approved by them."""
    with transaction.atomic():
        same = live_review(workspace, digest)
        if same is not None and same.state == ReviewState.APPROVED:
            # Approved before, under an older baseline: this write makes it the current
            # one again, as a new approval (the old row stays as history).
            same.lapse(ReviewState.SUPERSEDED, actor.user, "Typed again in the editor.")
        elif same is not None:
            # Pending or rejected: the reviewer's own typing decides it.
            ContractReview.objects.filter(pk=same.pk).update(
                state=ReviewState.SUPERSEDED,
                lapsed_by=actor.user,
                lapsed_at=timezone.now(),
                lapse_note="Typed in the editor by a reviewer, as a narrowing.",
            )
        review = _typed(
            workspace,
            actor,
            values,
            commit,
            ref,
            "typed in the editor (a narrowing)",
            baseline=baseline,
            state=ReviewState.APPROVED,
            decided_by=actor.user,
            decided_at=timezone.now(),
            note="Narrowed by a reviewer in the editor: the workspace's baseline now.",
        )
        record(
            workspace.team,
            actor,
            "contract.narrowed",
            f"contract-review:{review.public_id}",
            workspace.slug,
            commit=commit,
            narrowed=[w.key for w in contract.widenings(values, baseline, [])],
        )
        supersede_wider(review, actor)
    return review


def _typed(
    workspace: Workspace,
    actor: Actor,
    values: contract.Values,
    commit: str,
    ref: str,
    asked_for: str,
    **decision: Any,
) -> ContractReview:
    """A review of what a reviewer typed in the editor, with them as its asker and its
    commit's author (Berth made the commit, as them)."""
    return ContractReview.objects.create(
        workspace=workspace,
        content_hash=contract.content_hash(values),
        values=values,
        source=ReviewSource.PAGE,
        commit=commit,
        commit_author=str(actor.user),
        ref=ref[:200],
        asked_for=asked_for,
        requested_by=actor.user,
        **decision,
    )


def _widened_already(workspace: Workspace, before: str | None, baseline: contract.Values) -> bool:
    """Whether the file the editor opened already asked for more than `baseline`."""
    if before is None:
        return False
    try:
        values = contract.asked(workspace_config.parse(before))
    except workspace_config.ConfigError:
        return False  # an invalid file asked for nothing that could run
    return bool(contract.widenings(baseline, values, workspace.team.egress_ceiling))
