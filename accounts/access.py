"""Who is acting, and the one access helper per resource every door uses.

Anything of a team the actor is not in is answered 404, never 403: the actor must
not learn that it exists.
"""

from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AnonymousUser, User

from accounts.models import ApiToken, Membership, Role, Team
from core.errors import Forbidden, MissingScope, NotFound


@dataclass(frozen=True)
class Actor:
    """A signed-in person, or an agent acting through one of a person's tokens."""

    user: User
    token: ApiToken | None = None

    @classmethod
    def of_token(cls, token: ApiToken) -> "Actor":
        return cls(user=token.user, token=token)

    @property
    def is_human(self) -> bool:
        return self.token is None

    @property
    def label(self) -> str:
        if self.token:
            return f"token {self.token.name} of {self.user}"
        return str(self.user)

    def require_scope(self, scope: str) -> None:
        """Tokens carry scopes; a signed-in person has every scope their role allows."""
        if self.token is not None and not self.token.has_scope(scope):
            raise MissingScope(
                f"This token lacks the `{scope}` scope. Create a token that has it.",
                {"scope": scope},
            )


def access_team(user: User | AnonymousUser, slug: str, need: str = Role.MEMBER) -> Membership:
    """The user's membership of team `slug`, with at least role `need`.

    Raises NotFound when the user is not in the team (or it does not exist), and
    Forbidden when they are in it with too small a role.
    """
    if not user.is_authenticated:
        raise NotFound("No such team.")
    membership = (
        Membership.objects.select_related("team", "user").filter(team__slug=slug, user=user).first()
    )
    if membership is None:
        raise NotFound("No such team.")
    if not membership.has_role(need):
        raise Forbidden(
            f"This needs the {need} role in team {slug}; ask an admin of the team.",
            {"role": membership.role, "need": need},
        )
    return membership


def access_token(membership: Membership, public_id: str) -> ApiToken:
    """A token of the team: your own, or anyone's when you are an admin."""
    tokens = ApiToken.objects.filter(team=membership.team, public_id=public_id)
    if not membership.is_admin:
        tokens = tokens.filter(user=membership.user)
    token = tokens.select_related("user").first()
    if token is None:
        raise NotFound("No such token.")
    return token


def token_team(actor: Actor) -> Team:
    assert actor.token is not None
    return actor.token.team


def require_team_admin(actor: Actor, team: Team) -> Membership:
    """The actor's admin membership of `team`, or Forbidden `admin_required`: a
    signed-in admin, or a token of an admin that has `workspace:write`.

    A token acts with its owner's role: it is an admin's only while its user is an
    admin of the team, so a demoted admin's tokens lose the power with them. Someone
    outside the team gets 404, as everywhere.
    """
    membership = (
        Membership.objects.select_related("team", "user").filter(team=team, user=actor.user).first()
    )
    if membership is None or (actor.token is not None and actor.token.team_id != team.pk):
        raise NotFound("No such team.")
    actor.require_scope("workspace:write")
    if not membership.is_admin:
        raise Forbidden(
            f"Only an admin of team {team.slug} may do this; ask one of them.",
            {"role": membership.role, "need": Role.ADMIN},
            code="admin_required",
        )
    return membership


def sees_workspace(actor: Actor, team_id: int, slug: str) -> bool:
    """Whether the actor may see the records of a team's workspace (its runs, previews,
    deploys, contract reviews): a token of that team allowed that workspace, or a
    person in the team. The access helpers answer 404 otherwise."""
    if actor.token is not None:
        return actor.token.team_id == team_id and actor.token.allows_workspace(slug)
    return Membership.objects.filter(team=team_id, user=actor.user).exists()


def human_reviewer(
    actor: Actor, team: Team, verb: str, not_human: str, details: dict[str, Any], missing: str
) -> Membership:
    """The signed-in reviewer or admin taking a decision (`verb`, e.g. "approve a
    deploy"), or why not: 403 `approval_requires_human` saying `not_human` for a token
    (so never through MCP), 404 `missing` outside the team, 403 `reviewer_required` for
    a member. The same checks for every door and every kind of decision."""
    if not actor.is_human:
        raise Forbidden(not_human, details, code="approval_requires_human")
    membership = Membership.objects.filter(team=team, user=actor.user).first()
    if membership is None:
        raise NotFound(missing)
    if not membership.has_role(Role.REVIEWER):
        raise Forbidden(
            f"Only a reviewer or an admin of team {team.slug} may {verb}; you are a "
            f"{membership.role}.",
            {"role": membership.role},
            code="reviewer_required",
        )
    return membership
