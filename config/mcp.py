"""The MCP door at /mcp: the official SDK's MCPServer over Streamable HTTP, inside daphne.

Both protocol eras are served: the session-based one most deployed clients speak
(initialize, then `Mcp-Session-Id`), and the current one (each request on its own).
Facts about this stack that shaped the code:
- daphne has no ASGI lifespan, so the SDK's session manager runs in a process-lifetime
  task started on the first request, and is stopped from a Twisted "before shutdown"
  trigger (without it, requests fail with "Task group is not initialized", and daphne
  can hang on SIGTERM);
- `/mcp` and `/mcp/` are dispatched on the exact path (a mounted sub-app would answer
  307 redirects some clients break on);
- Django's ALLOWED_HOSTS does not cover this app: the SDK's transport security gets the
  allowed hosts and origins from Berth's settings (421 for a foreign Host, 403 for a
  foreign Origin);
- every request carries `Authorization: Bearer <berth token>`, checked here (401 with
  `WWW-Authenticate`) and again by each tool through `actor_of` (a token revoked
  mid-session stops working at once);
- tools are thin doors in each app's `mcp.py`; a BerthError becomes a tool error
  carrying the API's error object.
"""

import asyncio
import contextvars
import json
import logging
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings

# Importing each app's door registers its tools on `server`.
import deploys.mcp  # noqa: F401
import previews.mcp  # noqa: F401
import runs.mcp  # noqa: F401
import sessions.mcp  # noqa: F401
import workspaces.mcp  # noqa: F401
from accounts.auth import authenticate_bearer
from core.errors import BerthError, error_body
from core.mcp import server

log = logging.getLogger("berth.mcp")

PATHS = ("/mcp", "/mcp/")


def _hosts() -> tuple[list[str], list[str]]:
    """Berth's own hosts (any port) and the origins of its pages; never a preview's."""
    hosts, origins = [], []
    for allowed in settings.ALLOWED_HOSTS:
        if allowed == "*" or allowed.startswith("."):
            continue  # wildcards: previews and releases, which must never reach /mcp
        hosts += [allowed, f"{allowed}:*"]
        origins += [
            f"http://{allowed}",
            f"http://{allowed}:*",
            f"https://{allowed}",
            f"https://{allowed}:*",
        ]
    return hosts, origins


class SessionManager:
    """The SDK's session manager, run in one long-lived task started on first use (no
    lifespan under daphne) and stopped before the reactor shuts down."""

    def __init__(self) -> None:
        self.manager: StreamableHTTPSessionManager | None = None
        self.task: asyncio.Task[None] | None = None
        self.ready = asyncio.Event()
        self.stop = asyncio.Event()
        self.error: BaseException | None = None

    async def started(self) -> StreamableHTTPSessionManager:
        if self.task is None:  # no await between the check and the set: one starter
            hosts, origins = _hosts()
            server.streamable_http_app(
                # With ALLOWED_HOSTS = "*" or only wildcard domains, the operator chose not
                # to pin hosts: the SDK cannot express those, so its check is off.
                transport_security=TransportSecuritySettings(
                    enable_dns_rebinding_protection=bool(hosts),
                    allowed_hosts=hosts,
                    allowed_origins=origins,
                ),
                # The API's cap: a 10 MB file fits, base64-encoded, in one write_files.
                max_request_body_size=settings.MAX_REQUEST_BODY,
            )
            self.manager = server.session_manager
            # An empty context: the manager's task must not keep the first request's.
            self.task = asyncio.get_running_loop().create_task(
                self._run(), name="mcp-session-manager", context=contextvars.Context()
            )
            _stop_before_shutdown(self)
        await self.ready.wait()
        if self.error is not None or self.manager is None:
            raise RuntimeError("the MCP session manager did not start") from self.error
        return self.manager

    async def _run(self) -> None:
        assert self.manager is not None
        try:
            async with self.manager.run():
                self.ready.set()
                await self.stop.wait()
        except BaseException as e:
            self.error = e
            self.ready.set()
            raise

    async def shutdown(self) -> None:
        self.stop.set()
        if self.task is not None:
            try:
                await asyncio.wait_for(self.task, 10)
            except (TimeoutError, asyncio.CancelledError):
                log.warning("the MCP session manager did not stop in 10 s")
            except Exception:
                log.exception("the MCP session manager failed while stopping")


def _stop_before_shutdown(manager: SessionManager) -> None:
    """Under daphne (Twisted's asyncio reactor) stop the manager before the loop goes."""
    try:
        # Here, not at the top: importing the reactor installs one; daphne's is the one.
        from twisted.internet import defer, reactor
    except ImportError:  # pragma: no cover - not under Twisted
        return
    if not getattr(reactor, "running", False):
        return

    def stop() -> defer.Deferred[None]:
        return defer.Deferred.fromFuture(asyncio.ensure_future(manager.shutdown()))

    trigger: Any = reactor.addSystemEventTrigger  # zope's interface hides the signature
    trigger("before", "shutdown", stop)


_manager = SessionManager()


async def _reply(
    send: Any, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


async def mcp_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The ASGI door: authenticate, then hand the request to the SDK."""
    header = dict(scope["headers"]).get(b"authorization")
    try:
        actor = await database_sync_to_async(authenticate_bearer)(
            header.decode("latin-1") if header else None
        )
    except BerthError as e:
        await _reply(
            send,
            401,
            e.as_dict(),
            [(b"www-authenticate", b'Bearer realm="berth", error="invalid_token"')],
        )
        return
    length = dict(scope["headers"]).get(b"content-length", b"0")
    if length.isdigit() and int(length) > settings.MAX_REQUEST_BODY:
        await _reply(
            send,
            413,
            error_body(
                "too_large",
                "Request bodies are capped at "
                f"{settings.MAX_REQUEST_BODY // 2**20} MB; write "
                "large files in several write_files calls.",
            ),
        )
        return
    if _manager.stop.is_set():
        await _reply(send, 503, error_body("shutting_down", "Berth is restarting; retry."))
        return
    assert actor.token is not None
    # Bind the SDK's sessions to the token: another token cannot reuse a session id.
    scope = {
        **scope,
        "user": AuthenticatedUser(
            AccessToken(token=actor.token.public_id, client_id=actor.token.public_id, scopes=[])
        ),
    }
    manager = await _manager.started()
    await manager.handle_request(scope, receive, send)
