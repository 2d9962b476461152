"""JSON API doors onto deploys (thin: access, then an action). There is no approve,
reject or rollback here: those are a signed-in reviewer's page actions only."""

from django.http import HttpRequest
from ninja import Router, Status

from core.schemas import answers
from deploys import actions
from deploys.access import access_deploy
from deploys.models import DeployRequest, Route
from deploys.schemas import DeployIn, DeployOut, ReleaseOut
from workspaces.api import actor_of, workspace_for

router = Router(tags=["deploys"])


@router.post(
    "/workspaces/{slug}/deploys",
    response=answers(DeployOut, 403, 404, 409, 422, status=201),
    summary="Ask for a deploy of a commit; a human reviewer approves it in Berth",
)
def request_deploy(request: HttpRequest, slug: str, body: DeployIn | None = None) -> Status:
    workspace = workspace_for(request, slug, "deploy:request")
    body = body or DeployIn(ref=None, note="")
    deploy = actions.request_deploy(workspace, actor_of(request), body.ref, body.note)
    return Status(201, DeployOut.of(deploy, request.get_port()))


@router.get(
    "/workspaces/{slug}/deploys",
    response=answers(list[DeployOut], 403, 404, 422),
    summary="Deploy requests of a workspace",
)
def list_deploys(request: HttpRequest, slug: str, limit: int = 50) -> list[DeployOut]:
    workspace = workspace_for(request, slug, "deploy:request")
    deploys = DeployRequest.objects.filter(workspace=workspace).select_related(
        "workspace__team", "requested_by", "token", "build_run"
    )[: max(1, min(limit, 200))]
    return [DeployOut.of(d, request.get_port()) for d in deploys]


@router.get(
    "/deploys/{deploy_id}",
    response=answers(DeployOut, 403, 404),
    summary="One deploy request: state, approvals, release",
)
def get_deploy(request: HttpRequest, deploy_id: str) -> DeployOut:
    deploy = access_deploy(actor_of(request), deploy_id)
    return DeployOut.of(deploy, request.get_port())


@router.post(
    "/deploys/{deploy_id}/cancel",
    response=answers(DeployOut, 403, 404, 409),
    summary="Withdraw a pending deploy request",
)
def cancel_deploy(request: HttpRequest, deploy_id: str) -> DeployOut:
    deploy = access_deploy(actor_of(request), deploy_id)
    deploy = actions.cancel_deploy(deploy, actor_of(request))
    return DeployOut.of(deploy, request.get_port())


@router.get(
    "/workspaces/{slug}/release",
    response=answers(ReleaseOut, 403, 404),
    summary="What is live: commit, release, URL",
)
def live_release(request: HttpRequest, slug: str) -> ReleaseOut:
    workspace = workspace_for(request, slug, "deploy:request")
    route = (
        Route.objects.select_related("release__request", "release__process")
        .filter(workspace=workspace)
        .first()
    )
    return ReleaseOut.of(route, actions.release_url(workspace, request.get_port()))
