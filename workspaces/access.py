from accounts.access import Actor
from accounts.models import Team
from core.errors import NotFound
from workspaces.models import Workspace


def access_workspace(actor: Actor, team: Team, slug: str, scope: str) -> Workspace:
    """The workspace `slug` of `team` if the actor may use it with `scope`.

    404 when it does not exist, is another team's, or the token is limited to other
    workspaces (the actor must not learn it exists); 403 `missing_scope` otherwise.
    """
    workspace = next(iter(Workspace.objects.filter(team=team, slug=slug).order_by()[:1]), None)
    if workspace is None or (
        actor.token is not None
        and (actor.token.team_id != team.pk or not actor.token.allows_workspace(slug))
    ):
        raise NotFound(f"No workspace {slug!r}.", {"workspace": slug})
    actor.require_scope(scope)
    workspace.team = team  # already loaded: spare every door a query
    return workspace
