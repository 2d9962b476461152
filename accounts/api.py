from datetime import datetime

from django.http import HttpRequest
from ninja import Router, Schema

from accounts.access import Actor

router = Router(tags=["account"])


class TeamOut(Schema):
    id: str
    slug: str
    name: str


class MeOut(Schema):
    team: TeamOut
    user: str
    token: str
    token_name: str
    scopes: list[str]
    workspaces: list[str]
    secret_names: list[str]
    expires_at: datetime


@router.get("/me", response=MeOut, summary="Who this token is")
def me(request: HttpRequest) -> MeOut:
    actor: Actor = request.auth  # type: ignore[attr-defined]
    token = actor.token
    assert token is not None
    team = token.team
    return MeOut(
        team=TeamOut(id=team.public_id, slug=team.slug, name=team.name),
        user=str(token.user),
        token=token.public_id,
        token_name=token.name,
        scopes=token.scopes,
        workspaces=token.workspaces,
        secret_names=token.secret_names,
        expires_at=token.expires_at,
    )
