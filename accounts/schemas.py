"""The contract of accounts: who a token is (JSON API `GET /me`, MCP `whoami`)."""

from datetime import datetime

from django.contrib.auth.base_user import AbstractBaseUser
from pydantic import Field

from accounts.models import ApiToken
from core.schemas import Out


class RequestedBy(Out):
    user: str | None
    token: str | None = Field(description="the token's name, when a token asked")

    @classmethod
    def of(cls, user: AbstractBaseUser | None, token: ApiToken | None) -> "RequestedBy":
        return cls(user=user.get_username() if user else None, token=token.name if token else None)


class TeamOut(Out):
    id: str
    slug: str
    name: str


class MeOut(Out):
    team: TeamOut
    user: str
    token: str = Field(description="the token's public id (never its secret)")
    token_name: str
    scopes: list[str]
    workspaces: list[str] = Field(
        description="workspaces this token is limited to; empty: every workspace of the team"
    )
    secret_names: list[str] = Field(
        description="team secrets this token may grant to runs; empty: none"
    )
    expires_at: datetime

    @classmethod
    def of(cls, token: ApiToken) -> "MeOut":
        team = token.team
        return cls(
            team=TeamOut(id=team.public_id, slug=team.slug, name=team.name),
            user=str(token.user),
            token=token.public_id,
            token_name=token.name,
            scopes=list(token.scopes),
            workspaces=list(token.workspaces),
            secret_names=list(token.secret_names),
            expires_at=token.expires_at,
        )
