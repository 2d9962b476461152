from accounts.access import Actor, sees_workspace
from core.errors import NotFound
from runs.models import Run


def may_see_outputs(actor: Actor, run: Run) -> bool:
    """Whether the actor could have granted every secret the run was granted.

    A run's outputs (its log, changed files, tree, diff, artifacts, and committing them)
    may hold a granted value in a form no masking catches (base64, reversed, split), so
    they go only to those who may see the values' effects anyway: a signed-in member
    (who may grant any secret of the workspace), or a token whose secret list covers
    them all. For anyone else the run does not exist."""
    if actor.token is None or not run.secret_names:
        return True
    return set(run.secret_names) <= set(actor.token.secret_names or [])


def access_run(actor: Actor, public_id: str, scope: str = "run") -> Run:
    """A run the actor may see: its workspace's team is the actor's (a token's own team
    and allowed workspaces), and, for a run granted secrets, the actor could have
    granted them (`may_see_outputs`); anything else is 404."""
    run = (
        Run.objects.select_related("workspace__team", "requested_by", "token")
        .filter(public_id=public_id)
        .first()
    )
    if run is None:
        raise NotFound("No such run.")
    visible = sees_workspace(actor, run.workspace.team_id, run.workspace.slug)
    if not visible or not may_see_outputs(actor, run):
        raise NotFound("No such run.")
    actor.require_scope(scope)
    return run
