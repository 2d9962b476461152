"""Changes that widen what a sandbox may do wait for a person.

Every run, preview and release build asks for a contract (workspaces.contract.asked).
`admit` lets it through when that exact contract was approved for the workspace, or
when it asks for nothing the last approved contract did not allow; otherwise it opens
(or finds) a review and refuses, typed, naming what widened and the review's page.
Only a signed-in reviewer or admin decides, on that page (`approve`, `reject`;
`review_lapses.revoke`); no token does, through any door. Approvals are per workspace:
one covers its contract on every branch.

Only what a reviewer or admin types into the editor is theirs (workspaces.review_editor);
a commit of anything else (a session's files, an API write, a push) approves nothing.
A lapsed approval no longer counts (`contract_lapsed` stops what still runs under it:
workspaces.signals).
"""

from typing import Any

from django.db import IntegrityError, transaction

from accounts.access import Actor, human_reviewer
from accounts.actions import record
from accounts.models import Membership, Role
from core.errors import Conflict, Forbidden
from core.links import absolute
from workspaces import config as workspace_config
from workspaces import contract, contract_writes
from workspaces.models import (
    LIVE_REVIEW_STATES,
    ContractApproval,
    ContractReview,
    ReviewSource,
    ReviewState,
    Workspace,
)
from workspaces.review_lapses import supersede_wider
from workspaces.store import open_store


class ContractHeld(Conflict):
    """An ask held by a contract review: `contract_change_pending` until a person
    decides, `contract_change_rejected` after a rejection, until the change is reverted."""

    code = "contract_change_pending"


def last_approved(workspace: Workspace) -> ContractReview | None:
    return (
        ContractReview.objects.filter(workspace=workspace, state=ReviewState.APPROVED)
        .order_by("-decided_at", "-id")
        .first()
    )


def live_review(workspace: Workspace, digest: str) -> ContractReview | None:
    """The review that decides asks for this contract (a lapsed one decides nothing)."""
    return ContractReview.objects.filter(
        workspace=workspace, content_hash=digest, state__in=LIVE_REVIEW_STATES
    ).first()


def baseline_of(workspace: Workspace) -> tuple[ContractReview | None, contract.Values]:
    """The approved contract a new ask is compared with (the defaults before any).

    Against the contract a workspace was created with (a template's, or the one it had
    when reviews began), Berth's own limits are no widening: a template that starts
    narrower than the defaults (python-http's 512 MB) must not turn a file without its
    [sandbox] lines into a review, when a workspace without any file gets the defaults
    unasked. Only the limits: the runtime and egress of the template still hold, and a
    reviewer's approval or narrowing (any later baseline) is taken as it stands."""
    review = last_approved(workspace)
    if review is None:
        return None, contract.default_values()
    values = dict(review.values)
    if review.source == ReviewSource.INITIAL:
        defaults = contract.default_values()
        for key in contract.LIMIT_KEYS:
            values[key] = max(values[key], defaults[key])
    return review, values


def admit(
    workspace: Workspace,
    actor: Actor,
    values: contract.Values,
    *,
    commit: str,
    ref: str,
    asked_for: str,
) -> ContractReview | None:
    """The approved review an execution runs under, or a typed refusal.

    1. The exact contract was approved (any branch, a merge, a revert): it runs.
    2. It widens nothing of the last approved contract (the same or narrower): it runs.
    3. Otherwise its review is opened (once per contract) or found, and the ask is
       refused: `contract_change_pending`, or `contract_change_rejected` once a person
       rejected it, until the change is reverted.

    Called outside the caller's transaction, so the opened review outlives the refusal.
    """
    digest = contract.content_hash(values)
    review = live_review(workspace, digest)
    if review is not None and review.state == ReviewState.APPROVED:
        return review
    approved, baseline = baseline_of(workspace)
    widened = contract.widenings(baseline, values, workspace.team.egress_ceiling)
    if not widened:
        return approved
    if review is None:
        review = _open(workspace, actor, values, digest, commit, ref, asked_for)
    if review.state == ReviewState.PENDING:
        review.compare_with(baseline, [w.as_dict() for w in widened])
        if commit:
            # Each ask names its commit's writers: the same contract reached from
            # another branch may have been written by someone else as well.
            with open_store(workspace) as store:
                review.written_by.add(*contract_writes.writers(workspace, store, commit, baseline))
    raise refusal(review, widened)


def admits(workspace: Workspace, values: contract.Values) -> bool:
    """Whether today's approvals would admit this contract, without opening a review
    (what still runs under a lapsed approval is checked with it)."""
    review = live_review(workspace, contract.content_hash(values))
    if review is not None and review.state == ReviewState.APPROVED:
        return True
    _, baseline = baseline_of(workspace)
    return not contract.widenings(baseline, values, [])


def _open(
    workspace: Workspace,
    actor: Actor,
    values: contract.Values,
    digest: str,
    commit: str,
    ref: str,
    asked_for: str,
) -> ContractReview:
    author = ""
    if commit:
        with open_store(workspace) as store:
            author = store.commit(commit).author.decode("utf-8", "replace")
    try:
        with transaction.atomic():
            review = ContractReview.objects.create(
                workspace=workspace,
                content_hash=digest,
                values=values,
                state=ReviewState.PENDING,
                source=ReviewSource.ASKED,
                commit=commit,
                commit_author=author[:300],
                ref=ref[:200],
                asked_for=asked_for[:200],
                requested_by=actor.user,
                token=actor.token,
            )
            record(
                workspace.team,
                actor,
                "contract.review_opened",
                f"contract-review:{review.public_id}",
                workspace.slug,
                commit=commit,
                asked_for=asked_for,
            )
    except IntegrityError:  # asked at the same moment by another request
        found = live_review(workspace, digest)
        assert found is not None  # the unique constraint is over live reviews
        return found
    return review


def refusal(review: ContractReview, widened: list[contract.Widening]) -> ContractHeld:
    """The typed refusal every door answers, saying what widened and what to do."""
    items = "; ".join(w.message for w in widened)
    dropped = sorted({e for w in widened for e in w.outside_ceiling})
    ceiling = (
        f" (the team's egress ceiling would drop {', '.join(dropped)} today)" if dropped else ""
    )
    link = absolute(review.url)
    details: dict[str, Any] = {
        "review": review.public_id,
        "url": absolute(review.url),
        "state": review.state,
        "widened": [w.as_dict() for w in widened],
    }
    if review.state == ReviewState.REJECTED:
        who = review.decided_by.username if review.decided_by else "a reviewer"
        return ContractHeld(
            f"{who} rejected this sandbox contract ({items}{ceiling}); see {link}. "
            "Revert the change to workspace.toml, or ask without the override, to run "
            "under the approved contract.",
            details,
            code="contract_change_rejected",
        )
    return ContractHeld(
        f"This asks for more than workspace {review.workspace.slug}'s approved sandbox "
        f"contract: {items}{ceiling}. A reviewer or admin must approve it at {link}; "
        "or revert the change to workspace.toml (or ask without the override).",
        details,
        code="contract_change_pending",
    )


def _reviewer(review: ContractReview, actor: Actor, verb: str) -> Membership:
    """The same checks as a deploy's (accounts.access.human_reviewer)."""
    return human_reviewer(
        actor,
        review.workspace.team,
        f"{verb} a sandbox contract",
        f"Only a signed-in person may {verb} a sandbox contract: open {absolute(review.url)} in "
        "Berth. API tokens and MCP can read a review, never decide it.",
        {"review": review.public_id},
        "No such contract review.",
    )


def approve(
    review: ContractReview, actor: Actor, note: str = "", confirm_own: bool = False
) -> ContractReview:
    """A reviewer or admin who did not ask for it approves; under a team policy that
    allows self-approval, the asker may too, confirming it (recorded). A team that
    requires N distinct approvers for deploys requires them here too: the review is
    approved with the N-th."""
    _reviewer(review, actor, "approve")
    own = review.is_own(actor.user)
    team = review.workspace.team
    if own and not (team.allow_self_approval and confirm_own):
        allowed = (
            " (your team allows self-approval: confirm that you approve your own change)."
            if team.allow_self_approval
            else "."
        )
        if review.requested_by_id == actor.user.pk:
            who = "your token" if review.token_id else "you"
            raise Forbidden(
                f"This contract was asked for by {who}; another reviewer must approve it" + allowed,
                {"requested_by": actor.user.username},
                code="own_request",
            )
        # Whoever's run met the widening first, its writer is no independent approver.
        raise Forbidden(
            "You wrote this widening of workspace.toml (a commit that brought it in is "
            "yours, through whichever door); another reviewer must approve it" + allowed,
            {"written_by": actor.user.username},
            code="own_widening",
        )
    with transaction.atomic():
        locked = ContractReview.objects.select_for_update().get(pk=review.pk)
        if locked.state != ReviewState.PENDING:
            raise Conflict(f"This review is already {locked.state}.", {"state": locked.state})
        try:
            with transaction.atomic():
                ContractApproval.objects.create(review=review, user=actor.user)
        except IntegrityError:
            raise Conflict("You have approved this contract already.") from None
        # As for deploys: only approvals of people who are reviewers or admins now count.
        approvals = review.approvals.filter(
            user__memberships__team=team,
            user__memberships__role__in=(Role.REVIEWER, Role.ADMIN),
        )
        if not team.allow_self_approval:
            # A writer named by a later ask (another branch) after approving counts
            # no more than one refused at the door.
            approvals = approvals.exclude(user__in=review.written_by.all())
        given = approvals.count()
        needed = team.approvals_required
        if given < needed:
            record(
                team,
                actor,
                "contract.approved",
                f"contract-review:{review.public_id}",
                review.workspace.slug,
                note=note.strip()[:200],
                self_approved=own,
                approvals=given,
                needed=needed,
            )
            return review
        _decide(review, actor, ReviewState.APPROVED, note, own, "contract.approved")
        if review.source == ReviewSource.PAGE:
            # A reviewer's typed contract, approved: the approvals wider than it lapse,
            # as they would have had it narrowed alone.
            supersede_wider(review, actor)
    return review


def reject(review: ContractReview, actor: Actor, note: str = "") -> ContractReview:
    _reviewer(review, actor, "reject")
    _decide(review, actor, ReviewState.REJECTED, note, False, "contract.rejected")
    return review


def _decide(
    review: ContractReview, actor: Actor, to: str, note: str, own: bool, event: str
) -> None:
    with transaction.atomic():
        if not review.decide(to, actor.user, note.strip()[:5000], own):
            review.refresh_from_db()
            raise Conflict(f"This review is already {review.state}.", {"state": review.state})
        record(
            review.workspace.team,
            actor,
            event,
            f"contract-review:{review.public_id}",
            review.workspace.slug,
            note=review.note[:200],
            self_approved=own,
            widened=[w["key"] for w in review.widened],
        )


def approve_initial(workspace: Workspace, text: str | None) -> None:
    """A new workspace's first contract (empty, or a template's, both the operator's)
    is approved as it stands, as each workspace's was when reviews began."""
    try:
        values = contract.asked(workspace_config.parse(text or ""))
    except workspace_config.ConfigError:
        return
    ContractReview.objects.get_or_create(
        workspace=workspace,
        content_hash=contract.content_hash(values),
        defaults={
            "values": values,
            "state": ReviewState.APPROVED,
            "source": ReviewSource.INITIAL,
            "decided_at": workspace.created_at,
            "note": "The workspace's contract when it was created.",
        },
    )
