"""The contract of contract reviews, as the JSON API and the MCP tools both answer it
(core.schemas). Reading only: no door but a signed-in reviewer's page decides."""

from typing import Any

from pydantic import Field

from accounts.schemas import RequestedBy
from core.links import absolute
from core.schemas import Out, Timestamp
from workspaces.models import ContractReview


class WidenedOut(Out):
    key: str = Field(description="image, runtime, cpus, memory_mb, disk_mb, timeout_s or egress")
    before: Any = Field(description="the approved value it was compared with")
    after: Any = Field(description="the value asked for")
    message: str
    added: list[str] = Field(description="egress entries no approved entry covered")
    outside_ceiling: list[str] = Field(
        description="of those, the ones the team's egress ceiling would drop today"
    )


class ContractReviewOut(Out):
    id: str
    workspace: str
    state: str = Field(
        description="pending (waiting for a reviewer), approved, rejected, or an approval "
        "that no longer counts: superseded (a reviewer typed a narrower contract) or "
        "revoked"
    )
    source: str = Field(
        description="asked (a run, preview or release build asked for it), page (typed in "
        "the editor by a reviewer or admin) or initial (the contract when the workspace "
        "was created, or when reviews began)"
    )
    contract: dict[str, Any] = Field(description="the contract asked for")
    widened: list[WidenedOut]
    commit: str | None
    commit_author: str | None
    ref: str | None
    asked_for: str | None
    requested_by: RequestedBy
    written_by: list[str] = Field(
        description="who wrote the commits that brought the widening in (as Berth saw "
        "them at its doors): none of them counts as another person's approval"
    )
    decided_by: str | None
    decided_at: Timestamp | None
    note: str
    self_approved: bool
    lapsed_by: str | None = Field(description="who superseded or revoked the approval")
    lapsed_at: Timestamp | None
    created_at: Timestamp
    url: str = Field(description="the page where a reviewer or admin decides it")
    next: str = Field(description="what to do next")

    @classmethod
    def of(cls, review: ContractReview) -> "ContractReviewOut":
        return cls.model_validate(
            {
                "id": review.public_id,
                "workspace": review.workspace.slug,
                "state": review.state,
                "source": review.source,
                "contract": review.values,
                "widened": review.widened,
                "commit": review.commit or None,
                "commit_author": review.commit_author or None,
                "ref": review.ref or None,
                "asked_for": review.asked_for or None,
                "requested_by": RequestedBy.of(review.requested_by, review.token),
                "written_by": sorted(u.get_username() for u in review.written_by.all()),
                "decided_by": review.decided_by.get_username() if review.decided_by else None,
                "decided_at": review.decided_at.isoformat() if review.decided_at else None,
                "note": review.note,
                "self_approved": review.self_approved,
                "lapsed_by": review.lapsed_by.get_username() if review.lapsed_by else None,
                "lapsed_at": review.lapsed_at.isoformat() if review.lapsed_at else None,
                "created_at": review.created_at.isoformat(),
                "url": absolute(review.url),
                "next": _next(review),
            }
        )


def _next(review: ContractReview) -> str:
    if review.state == "pending":
        return (
            f"A reviewer or admin must approve it at {absolute(review.url)} (no token can); "
            "ask your person to, then try again. Or revert the change to workspace.toml."
        )
    if review.state == "rejected":
        return "Rejected: revert the change to workspace.toml, or ask without the override."
    if review.state in ("superseded", "revoked"):
        return (
            f"This approval no longer counts ({review.state}): an ask for this contract "
            "opens a new review, which a reviewer or admin must approve; or ask for no "
            "more than the workspace's approved contract."
        )
    return "Approved: runs, previews and release builds asking for this contract go ahead."


class ContractReviewList(Out):
    reviews: list[ContractReviewOut]
