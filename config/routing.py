from typing import Any

from accounts.routing import websocket_urlpatterns as activity_websockets
from previews.routing import websocket_urlpatterns as preview_websockets
from runner.routing import websocket_urlpatterns as runner_websockets

# Each app appends its consumers' routes here (logs, activity) as they arrive.
websocket_urlpatterns: list[Any] = [*runner_websockets, *preview_websockets,
                                    *activity_websockets]


def route_by_host(app: Any) -> Any:
    """Send requests for preview hosts (`<id>.PREVIEW_DOMAIN`) and release hosts
    (`<workspace>--<team>.APPS_DOMAIN`) to the preview proxy, the rest to `app`:
    untrusted preview code never runs on the app's origin, and the app's session never
    reaches a preview (DESIGN.md, "Previews and releases")."""
    from config.mcp import PATHS, mcp_app
    from previews.gate import from_gateway
    from previews.proxy import proxy

    async def router(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            public_id = proxy().preview_of(scope)
            if public_id is not None:
                await proxy()(from_gateway(scope), receive, send, public_id)
                return
            release = proxy().release_of(scope)
            if release is not None:
                await proxy().serve_release(from_gateway(scope), receive, send, release)
                return
            scope = from_gateway(scope, trust=False)  # the app never sees them
            if scope["type"] == "http" and scope["path"] in PATHS:
                # Exactly /mcp and /mcp/: a mounted sub-app would answer 307s.
                await mcp_app(scope, receive, send)
                return
        await app(scope, receive, send)

    return router
