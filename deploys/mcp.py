"""MCP tools onto deploys: ask for one, and follow it. There is no approve tool: a
person approves on the review page, and the request's `url` is where."""

from channels.db import database_sync_to_async

from accounts.auth import actor_of
from core.mcp import Ctx, tool
from deploys import actions
from deploys.access import access_deploy
from deploys.schemas import AgentDeploy
from workspaces.mcp import workspace_for


@tool()
async def request_deploy(
    ctx: Ctx, workspace: str, ref: str | None = None, note: str = ""
) -> AgentDeploy:
    """Ask for a deploy of a commit (the ref is resolved now; the release is built from
    exactly that commit). A human reviewer must approve it at review_url: tell your
    person. Instant. Then get_deploy to follow it (building, releasing, live)."""
    actor = await actor_of(ctx)

    def ask() -> AgentDeploy:
        w = workspace_for(actor, workspace, "deploy:request")
        return AgentDeploy.of_deploy(actions.request_deploy(w, actor, ref, note))

    return await database_sync_to_async(ask)()


@tool()
async def get_deploy(ctx: Ctx, deploy_id: str) -> AgentDeploy:
    """A deploy request's state, approvals and release. Instant."""
    actor = await actor_of(ctx)
    return await database_sync_to_async(
        lambda: AgentDeploy.of_deploy(access_deploy(actor, deploy_id))
    )()
