"""JSON API doors onto deploys (thin: access, then an action). There is no approve,
reject or rollback here: those are a signed-in reviewer's page actions only."""

from typing import Any

from django.http import HttpRequest
from ninja import Field, Router, Schema, Status
from pydantic import ConfigDict

from deploys import actions
from deploys.access import access_deploy
from deploys.models import DeployRequest, Release, Route
from workspaces.api import actor_of, workspace_for

router = Router(tags=["deploys"])


class DeployIn(Schema):
    model_config = ConfigDict(extra="forbid")

    ref: str | None = Field(None, max_length=200)
    note: str = Field("", max_length=5000)


@router.post(
    "/workspaces/{slug}/deploys",
    response={201: dict[str, Any]},
    summary="Ask for a deploy of a commit; a human reviewer approves it in Berth",
)
def request_deploy(request: HttpRequest, slug: str, body: DeployIn | None = None) -> Status:
    workspace = workspace_for(request, slug, "deploy:request")
    body = body or DeployIn(ref=None, note="")
    deploy = actions.request_deploy(workspace, actor_of(request), body.ref, body.note)
    return Status(201, actions.deploy_summary(deploy, request.get_port()))


@router.get("/workspaces/{slug}/deploys", summary="Deploy requests of a workspace")
def list_deploys(request: HttpRequest, slug: str, limit: int = 50) -> list[dict[str, Any]]:
    workspace = workspace_for(request, slug, "deploy:request")
    deploys = DeployRequest.objects.filter(workspace=workspace).select_related(
        "workspace__team", "requested_by", "token", "build_run"
    )[: max(1, min(limit, 200))]
    return [actions.deploy_summary(d, request.get_port()) for d in deploys]


@router.get("/deploys/{deploy_id}", summary="One deploy request: state, approvals, release")
def get_deploy(request: HttpRequest, deploy_id: str) -> dict[str, Any]:
    deploy = access_deploy(actor_of(request), deploy_id)
    return actions.deploy_summary(deploy, request.get_port())


@router.post("/deploys/{deploy_id}/cancel", summary="Withdraw a pending deploy request")
def cancel_deploy(request: HttpRequest, deploy_id: str) -> dict[str, Any]:
    deploy = access_deploy(actor_of(request), deploy_id)
    deploy = actions.cancel_deploy(deploy, actor_of(request))
    return actions.deploy_summary(deploy, request.get_port())


@router.get("/workspaces/{slug}/release", summary="What is live: commit, release, URL")
def live_release(request: HttpRequest, slug: str) -> dict[str, Any]:
    workspace = workspace_for(request, slug, "deploy:request")
    route = Route.objects.select_related("release__request").filter(workspace=workspace).first()
    if route is None:
        return {"live": None, "url": actions.release_url(workspace, request.get_port())}
    release: Release = route.release
    approvers = [a.user.username for a in release.request.approvals.select_related("user")]
    return {
        "live": {
            "release": release.number,
            "commit": release.commit,
            "deploy": release.request.public_id,
            "since": route.switched_at,
            "approved_by": approvers,
            "restored_at": release.restored_at,
            "rollback_of": release.rollback_of.number if release.rollback_of else None,
        },
        "url": actions.release_url(workspace, request.get_port()),
    }
