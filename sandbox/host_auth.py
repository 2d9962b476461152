"""How a runner host proves itself to the web host's internal API (docs/hosts.md,
"The internal API"): its token from `manage.py hosts add`, of which the web host keeps
the digest alone. A user's API token is no host's, and a host's token opens no door of
the public API (its prefix is not an API token's)."""

from django.http import HttpRequest
from ninja.security import HttpBearer

from core.errors import BerthError
from sandbox.hosts import Host


class HostUnauthenticated(BerthError):
    status = 401
    code = "unauthenticated"


def host_of_bearer(header: str | None) -> Host:
    """The host behind an `Authorization` header value, or HostUnauthenticated saying
    why; the token itself is never put in a message or a log line."""
    scheme, _, value = (header or "").strip().partition(" ")
    value = value.strip()
    if scheme.lower() != "bearer" or not value:
        raise HostUnauthenticated(
            "Send the host's token as `Authorization: Bearer berth_host_…` "
            "(`manage.py hosts add NAME` on the web host printed it)."
        )
    host = Host.by_token(value)
    if host is None:
        raise HostUnauthenticated(
            "This is no host's token: it was copied wrong, the host was forgotten, or it "
            "was given a new one (`manage.py hosts add` prints a host's once).",
            code="invalid_token",
        )
    return host


class HostAuth(HttpBearer):
    def __call__(self, request: HttpRequest) -> Host:
        return host_of_bearer(request.META.get("HTTP_AUTHORIZATION"))

    def authenticate(self, request: HttpRequest, token: str) -> Host:  # pragma: no cover
        raise NotImplementedError  # __call__ reads the header itself to say what is wrong
