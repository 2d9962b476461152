"""MCP tools onto deploys: ask for one, and follow it. There is no approve tool: a
person approves on the review page, and the request's `url` is where."""

from channels.db import database_sync_to_async
from pydantic import BaseModel, Field

from accounts.auth import actor_of
from core.mcp import Ctx, tool
from deploys import actions
from deploys.access import access_deploy
from deploys.models import DeployRequest
from workspaces.mcp import workspace_for


class DeployOut(BaseModel):
    id: str
    workspace: str
    commit: str
    state: str = Field(
        description="requested (waiting for a human reviewer), approved, "
        "rejected, cancelled, building, releasing, live, failed, "
        "superseded or rolled_back"
    )
    reason: str | None
    message: str | None
    approvals: list[str]
    approvals_required: int
    review_url: str = Field(description="the page where a human reviewer approves it")
    release: int | None
    release_url: str


def _out(deploy: DeployRequest) -> DeployOut:
    s = actions.deploy_summary(deploy)
    return DeployOut(
        id=s["id"],
        workspace=s["workspace"],
        commit=s["commit"],
        state=s["state"],
        reason=s["reason"],
        message=s["message"],
        approvals=s["approvals"],
        approvals_required=s["approvals_required"],
        review_url=s["url"],
        release=s["release"],
        release_url=s["release_url"],
    )


@tool()
async def request_deploy(
    ctx: Ctx, workspace: str, ref: str | None = None, note: str = ""
) -> DeployOut:
    """Ask for a deploy of a commit (the ref is resolved now; the release is built from
    exactly that commit). A human reviewer must approve it at review_url: tell your
    person. Instant. Then get_deploy to follow it (building, releasing, live)."""
    actor = await actor_of(ctx)

    def ask() -> DeployOut:
        w = workspace_for(actor, workspace, "deploy:request")
        return _out(actions.request_deploy(w, actor, ref, note))

    return await database_sync_to_async(ask)()


@tool()
async def get_deploy(ctx: Ctx, deploy_id: str) -> DeployOut:
    """A deploy request's state, approvals and release. Instant."""
    actor = await actor_of(ctx)
    return await database_sync_to_async(lambda: _out(access_deploy(actor, deploy_id)))()
