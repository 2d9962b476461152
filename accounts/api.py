from django.http import HttpRequest
from ninja import Router

from accounts.access import Actor
from accounts.schemas import MeOut
from core.schemas import answers

router = Router(tags=["account"])


@router.get("/me", response=answers(MeOut), summary="Who this token is")
def me(request: HttpRequest) -> MeOut:
    actor: Actor = request.auth  # type: ignore[attr-defined]
    assert actor.token is not None
    return MeOut.of(actor.token)
