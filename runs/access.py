from collections.abc import Callable

from accounts.access import Actor, sees_workspace
from core import fanout
from core.errors import NotFound
from logs import logstore
from runs.models import Run

# Checks of the apps above that own a run's purpose (a session's run: sessions.apps),
# each saying whether the actor may see that run's outputs. A run's own `secret_names`
# are what its container gets in its env, so an owner's grants never go there.
OUTPUT_CHECKS: dict[str, Callable[[Actor, Run], bool]] = {}


def outputs_access_changed(run_public_id: str) -> None:
    """An owner's check of the run's outputs may answer otherwise now (a session was
    granted a secret): the run's open log sockets check their access again at once
    (accounts.socket_access), not at their next periodic check. They are in the log's
    group already (joined at connect, before which no message is handled); its other
    listeners (runs.waiting) take any message as a wake-up and only look again."""
    fanout.group_send(logstore.group_name(run_public_id), {"type": "access.changed"})


def may_see_outputs(actor: Actor, run: Run) -> bool:
    """Whether the actor could have granted every secret the run was granted.

    A run's outputs (its log, changed files, tree, diff, artifacts, and committing them)
    may hold a granted value in a form no masking catches (base64, reversed, split), so
    they go only to those who may see the values' effects anyway: a signed-in member
    (who may grant any secret of the workspace), or a token whose secret list covers
    them all. For anyone else the run does not exist."""
    if actor.token is None:
        return True
    if not set(run.secret_names) <= set(actor.token.secret_names or []):
        return False
    check = OUTPUT_CHECKS.get(run.purpose)
    return check is None or check(actor, run)


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
