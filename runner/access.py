from accounts.access import Actor
from accounts.models import Membership
from config.errors import NotFound
from runner.models import Run


def access_run(actor: Actor, public_id: str, scope: str = "run") -> Run:
    """A run the actor may see: its workspace's team is the actor's (a token's own team
    and allowed workspaces); anything else is 404."""
    run = Run.objects.select_related("workspace__team", "requested_by", "token").filter(
        public_id=public_id).first()
    if run is None:
        raise NotFound("No such run.")
    workspace = run.workspace
    if actor.token is not None:
        visible = (actor.token.team_id == workspace.team_id and
                   actor.token.allows_workspace(workspace.slug))
    else:
        visible = Membership.objects.filter(team=workspace.team_id, user=actor.user).exists()
    if not visible:
        raise NotFound("No such run.")
    actor.require_scope(scope)
    return run
