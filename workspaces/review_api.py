"""JSON API doors onto contract reviews: read only. Approve and reject are a signed-in
reviewer's page actions (workspaces.review_views); no token decides, through any door."""

from django.http import HttpRequest
from ninja import Router

from core.schemas import answers
from workspaces.api import actor_of, workspace_for
from workspaces.models import ContractReview, ReviewState
from workspaces.review_access import access_review
from workspaces.review_schemas import ContractReviewList, ContractReviewOut

router = Router(tags=["contract reviews"])


@router.get(
    "/contract-reviews/{review_id}",
    response=answers(ContractReviewOut, 403, 404),
    summary="One sandbox contract review: what widened, its state, who decided",
)
def get_review(request: HttpRequest, review_id: str) -> ContractReviewOut:
    return ContractReviewOut.of(access_review(actor_of(request), review_id))


@router.get(
    "/workspaces/{slug}/contract-reviews",
    response=answers(ContractReviewList, 403, 404, 422),
    summary="A workspace's contract reviews, newest first (pending only with ?pending=true)",
)
def list_reviews(
    request: HttpRequest, slug: str, pending: bool = False, limit: int = 50
) -> ContractReviewList:
    workspace = workspace_for(request, slug, "workspace:read")
    found = ContractReview.objects.filter(workspace=workspace).select_related(
        "workspace__team", "requested_by", "token", "decided_by"
    )
    if pending:
        found = found.filter(state=ReviewState.PENDING)
    return ContractReviewList(
        reviews=[ContractReviewOut.of(r) for r in found[: max(1, min(limit, 200))]]
    )
