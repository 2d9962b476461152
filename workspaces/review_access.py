"""The one access helper for contract reviews, for every door."""

from accounts.access import Actor, sees_workspace
from core.errors import NotFound
from workspaces.models import ContractReview


def access_review(actor: Actor, public_id: str) -> ContractReview:
    """A contract review the actor may see: its workspace's team is the actor's (a
    token's own team and allowed workspaces, with `workspace:read`); anything else is
    404, exactly as for one that does not exist."""
    review = (
        ContractReview.objects.select_related(
            "workspace__team", "requested_by", "token", "decided_by"
        )
        .filter(public_id=public_id)
        .first()
    )
    if review is None:
        raise NotFound("No such contract review.")
    visible = sees_workspace(actor, review.workspace.team_id, review.workspace.slug)
    if not visible:
        raise NotFound("No such contract review.")
    actor.require_scope("workspace:read")
    return review
