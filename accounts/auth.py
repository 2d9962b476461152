"""Bearer-token authentication for the JSON API and MCP."""

from channels.db import database_sync_to_async
from django.http import HttpRequest
from django.utils import timezone
from mcp.server.mcpserver import Context
from ninja.security import HttpBearer

from accounts.access import Actor
from accounts.models import ApiToken
from core.errors import BerthError


class Unauthenticated(BerthError):
    status = 401
    code = "unauthenticated"


def authenticate_bearer(header: str | None) -> Actor:
    """The actor behind an `Authorization` header value, or Unauthenticated saying why.

    The token value itself is never put in a message, a log line or an Activity row.
    """
    if not header:
        raise Unauthenticated(
            "Send an API token as `Authorization: Bearer berth_…`; create one on the "
            "Tokens page of your team."
        )
    scheme, _, value = header.strip().partition(" ")
    value = value.strip()
    if scheme.lower() != "bearer" or not value or " " in value:
        raise Unauthenticated(
            "The Authorization header must be `Bearer <token>`.", code="malformed_authorization"
        )
    token = ApiToken.find(value)
    if token is None:
        raise Unauthenticated(
            "This token is not valid. Check that it was copied whole.", code="invalid_token"
        )
    if token.revoked_at is not None:
        raise Unauthenticated("This token was revoked. Create a new one.", code="token_revoked")
    if token.expires_at <= timezone.now():
        raise Unauthenticated("This token has expired. Create a new one.", code="token_expired")
    # A person removed from the team takes their tokens' access with them.
    if not token.owner_is_member:  # type: ignore[attr-defined]
        raise Unauthenticated("This token's owner is no longer in its team.", code="token_revoked")
    token.touch()
    return Actor.of_token(token)


class TokenAuth(HttpBearer):
    def __call__(self, request: HttpRequest) -> Actor:
        return authenticate_bearer(request.META.get("HTTP_AUTHORIZATION"))

    def authenticate(self, request: HttpRequest, token: str) -> Actor:  # pragma: no cover
        raise NotImplementedError  # __call__ reads the header itself to say what is wrong


async def actor_of(ctx: Context) -> Actor:
    """The token behind this call (checked for every call: revocation and expiry apply
    at once, mid-session too)."""
    header = (ctx.headers or {}).get("authorization")
    return await database_sync_to_async(authenticate_bearer)(header)
