from typing import Any
from urllib.parse import ParseResult

from channels.security.websocket import OriginValidator
from django.conf import settings

from accounts.routing import websocket_urlpatterns as activity_websockets
from config.mcp import PATHS, mcp_app
from deploys.routing import websocket_urlpatterns as deploy_websockets
from previews.decide import decider
from previews.gate import from_gateway
from previews.routing import websocket_urlpatterns as preview_websockets
from runs.routing import websocket_urlpatterns as runner_websockets
from sessions.routing import websocket_urlpatterns as session_websockets

# Each app appends its consumers' routes here (logs, activity) as they arrive.
websocket_urlpatterns: list[Any] = [
    *runner_websockets,
    *session_websockets,
    *preview_websockets,
    *deploy_websockets,
    *activity_websockets,
]


def route_by_host(app: Any) -> Any:
    """Send requests for preview hosts (`<id>.PREVIEW_DOMAIN`) and release hosts
    (`<workspace>--<team>.APPS_DOMAIN`) to the door where the preview gateway asks what
    to do with them (previews.decide), the rest to `app`: untrusted preview code never
    runs on the app's origin, and the app's session never reaches a preview
    (docs/security.md)."""

    async def router(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            host = _host(scope)
            lookups = decider().lookups
            if lookups.preview_of(host) is not None or lookups.release_of(host) is not None:
                await decider()(from_gateway(scope), receive, send)
                return
            scope = from_gateway(scope, trust=False)  # the app never sees them
            if scope["type"] == "http" and scope["path"] in PATHS:
                # Exactly /mcp and /mcp/: a mounted sub-app would answer 307s.
                await mcp_app(scope, receive, send)
                return
        await app(scope, receive, send)

    return router


def _host(scope: dict[str, Any]) -> str:
    for key, value in scope["headers"]:
        if key == b"host":
            return str(value.decode("latin-1")).lower()
    return ""


class BerthOriginValidator(OriginValidator):
    """Berth's own WebSockets (logs, activity) take an Origin among ALLOWED_HOSTS, as
    channels' AllowedHostsOriginValidator does, but never a preview or release host:
    ALLOWED_HOSTS names those domains (their requests reach this process too), and
    where they share a site with Berth, a preview's page would otherwise open Berth's
    sockets with its visitor's session cookie."""

    def __init__(self, application: Any) -> None:
        super().__init__(application, settings.ALLOWED_HOSTS)
        self.foreign = tuple(
            d.lower().strip(".") for d in (settings.PREVIEW_DOMAIN, settings.APPS_DOMAIN)
        )

    def valid_origin(self, parsed_origin: ParseResult | None) -> bool:
        host = (parsed_origin.hostname or "") if parsed_origin is not None else ""
        if any(host == d or host.endswith("." + d) for d in self.foreign):
            return False
        return bool(super().valid_origin(parsed_origin))
