from accounts.access import Actor, sees_workspace
from core.errors import Conflict, NotFound
from previews.models import Preview
from sessions.access import require_cover


def access_preview(actor: Actor, public_id: str, scope: str = "preview") -> Preview:
    """A preview the actor may see: its workspace's team is the actor's (a token's own
    team and allowed workspaces); anything else is 404, as for runs. A preview of a
    session is refused (403 `secret_grant_required`) to an actor who does not cover
    the session's grants, as the session's exec door is (sessions.access)."""
    preview = (
        Preview.objects.select_related(
            "workspace__team", "run", "session__run", "requested_by", "token"
        )
        .filter(public_id=public_id)
        .first()
    )
    if preview is None:
        raise NotFound("No such preview.")
    visible = sees_workspace(actor, preview.workspace.team_id, preview.workspace.slug)
    if not visible:
        raise NotFound("No such preview.")
    actor.require_scope(scope)
    if preview.session is not None:
        # A preview of a session is a use of it: its app can read whatever the
        # session's execs were granted (another process's environment, a file).
        require_cover(actor, preview.session)
    return preview


def managed_preview(actor: Actor, public_id: str) -> Preview:
    """A preview the actor may stop, restart or make public: never a release's process,
    which only deploys move (a deploy, a rollback, the agent's restore)."""
    preview = access_preview(actor, public_id)
    if preview.kind == "release":
        raise Conflict(
            "This is the process of a release: deploys run it. Ask for a deploy, "
            "or roll back on the workspace's Deploys tab.",
            code="release_process",
        )
    return preview
