from accounts.access import Actor, sees_workspace
from core.errors import NotFound
from deploys.models import DeployRequest


def access_deploy(actor: Actor, public_id: str, scope: str = "deploy:request") -> DeployRequest:
    """A deploy request the actor may see: its workspace's team is the actor's (a
    token's own team and allowed workspaces); anything else is 404."""
    deploy = (
        DeployRequest.objects.select_related(
            "workspace__team", "requested_by", "token", "build_run"
        )
        .filter(public_id=public_id)
        .first()
    )
    if deploy is None:
        raise NotFound("No such deploy.")
    visible = sees_workspace(actor, deploy.workspace.team_id, deploy.workspace.slug)
    if not visible:
        raise NotFound("No such deploy.")
    actor.require_scope(scope)
    return deploy
