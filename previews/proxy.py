"""The preview proxy: an ASGI app for `<preview-id>.<PREVIEW_DOMAIN>` hosts.

`config.routing.route_by_host` sends those hosts here before Django sees them. For
each request:
1. `/__berth/ticket?t=…&next=/…` exchanges a single-use ticket for the preview's
   cookie (previews.gate) and redirects to `next` on the same host;
2. a non-public preview or release takes no request from another site's pages but a
   navigation, and is framed by Berth's pages only (previews.headers: `refusal`, 403
   `cross_origin_refused`, and `with_frame_ancestors` on every answer);
3. a private preview needs that cookie (a browser without it is sent to the app's
   `/previews/<id>/open`, which checks access and comes back with a ticket);
4. a preview that is not ready gets a typed answer (previews.pages), 503;
5. a WebSocket is relayed for as long as its viewer may see the target
   (previews.tunnel_access);
6. everything else is forwarded into the sandbox over a socket created in its network
   namespace (previews.upstream), with Berth's cookies and any Authorization header
   removed, X-Forwarded-* set from the real connection, and the answer streamed back
   untouched except for hop-by-hop headers and Set-Cookie for other domains. Redirects
   are passed back, never followed.
"""

import asyncio
import logging
import re
import time
from typing import Any
from urllib.parse import parse_qs, quote

import h11
from channels.db import database_sync_to_async
from django.conf import settings

from core import fanout
from previews import gate, pages, tunnel_access
from previews.backpressure import Backpressure
from previews.headers import (
    REFUSED,
    berth_origins,
    forwarded_headers,
    own_origin,
    parse_cookies,
    refusal,
    response_headers,
    viewer_cookie,
    with_frame_ancestors,
)
from previews.upstream import Pool, Upstream, UpstreamClosed
from previews.websocket import proxy_websocket
from sandbox.netns import NamespaceGone

log = logging.getLogger("berth.previews")

TARGET_TTL_S = 1.0
VIEWER_TTL_S = 30.0
TOUCH_EVERY_S = 1.0
SMALL_BODY = 256 * 1024
HOLD_RECHECK_S = 1.0


class Proxy:
    """State shared by every request on this process: caches, pool, connection counts."""

    def __init__(self) -> None:
        self.host_re = re.compile(
            r"^([a-z0-9]{1,12})\." + re.escape(settings.PREVIEW_DOMAIN) + r"(?::\d{1,5})?$"
        )
        # `<workspace>--<team>.APPS_DOMAIN`: slugs have single hyphens only, so "--" splits.
        self.release_re = re.compile(
            r"^([a-z0-9-]{1,30})--([a-z0-9-]{1,30})\."
            + re.escape(settings.APPS_DOMAIN)
            + r"(?::\d{1,5})?$"
        )
        self.routes: dict[tuple[str, str], tuple[float, str | None]] = {}
        self.pool = Pool()
        self.targets: dict[str, tuple[float, gate.Target | None]] = {}
        self.lookups: dict[str, asyncio.Future[gate.Target | None]] = {}
        self.viewers: dict[tuple[str, str], tuple[float, bool]] = {}
        self.touched: dict[int, float] = {}
        self.open: dict[str, int] = {}
        # Read once: Django's settings object costs a lookup per attribute per request.
        self.guard = settings.PREVIEW_CROSS_SITE_GUARD
        # Behind a TLS proxy (BEHIND_TLS_PROXY) every request came in over https.
        self.tls = bool(getattr(settings, "SECURE_PROXY_SSL_HEADER", None))

    def preview_of(self, scope: dict[str, Any]) -> str | None:
        host = _header(scope, b"host").lower()
        m = self.host_re.match(host)
        return m.group(1) if m else None

    def release_of(self, scope: dict[str, Any]) -> tuple[str, str] | None:
        m = self.release_re.match(_header(scope, b"host").lower())
        return (m.group(1), m.group(2)) if m else None

    async def serve_release(
        self, scope: dict[str, Any], receive: Any, send: Any, key: tuple[str, str]
    ) -> None:
        """A release host: whichever release process the workspace's route points at
        (as of at most TARGET_TTL_S ago; the previous process outlives a switch by
        RELEASE_DRAIN_S, so a request on its way there still lands)."""
        public_id = await self.route(key)
        if public_id is None:
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 4404})
                return
            await _reply(
                send,
                *pages.answer(
                    404,
                    "no_release",
                    "Nothing is released at this address yet: ask for a "
                    "deploy and have a reviewer approve it.",
                    json_wanted=pages.wants_json(dict(scope["headers"])),
                    title="No release",
                ),
            )
            return
        await self(scope, receive, send, public_id)

    async def route(self, key: tuple[str, str]) -> str | None:
        """The release process a release host points at, as of at most TARGET_TTL_S ago."""
        now = time.monotonic()
        cached = self.routes.get(key)
        if cached and now - cached[0] < TARGET_TTL_S:
            return cached[1]
        public_id = await database_sync_to_async(gate.routed_process)(*key)
        if len(self.routes) > 10_000:
            self.routes.clear()
        self.routes[key] = (now, public_id)
        return public_id

    async def target(self, public_id: str, fresh: bool = False) -> gate.Target | None:
        """The preview as of at most TARGET_TTL_S ago. One lookup at a time per preview:
        requests arriving meanwhile wait for it instead of each asking the database."""
        now = time.monotonic()
        cached = self.targets.get(public_id)
        if cached and not fresh and now - cached[0] < TARGET_TTL_S:
            return cached[1]
        pending = self.lookups.get(public_id)
        if pending is None:
            pending = asyncio.ensure_future(database_sync_to_async(gate.target)(public_id))
            self.lookups[public_id] = pending
            pending.add_done_callback(lambda _: self.lookups.pop(public_id, None))
        t = await asyncio.shield(pending)
        if len(self.targets) > 10_000:
            self.targets.clear()
        self.targets[public_id] = (now, t)
        return t

    async def allowed(self, scope: dict[str, Any], t: gate.Target) -> bool:
        if t.public:
            return True
        return await self.viewer(viewer_cookie(_cookies(scope)), t)

    async def viewer(self, value: str | None, t: gate.Target) -> bool:
        """Whether a preview cookie's holder may see `t` (cached VIEWER_TTL_S)."""
        if not value:
            return False
        now = time.monotonic()
        cached = self.viewers.get((t.public_id, value))
        if cached and now - cached[0] < VIEWER_TTL_S:
            return cached[1]
        ok = await database_sync_to_async(gate.viewer_allowed)(value, t)
        self.remember_viewer(t.public_id, value, ok)
        return ok

    def remember_viewer(self, public_id: str, value: str, ok: bool) -> None:
        if len(self.viewers) > 10_000:
            self.viewers.clear()
        self.viewers[(public_id, value)] = (time.monotonic(), ok)

    async def touch(self, t: gate.Target) -> None:
        now = time.monotonic()
        if now - self.touched.get(t.pk, 0) >= TOUCH_EVERY_S:
            self.touched[t.pk] = now
            await database_sync_to_async(gate.touch)(t.pk)

    # -- the ASGI door -----------------------------------------------------------------

    async def __call__(
        self, scope: dict[str, Any], receive: Any, send: Any, public_id: str
    ) -> None:
        json_wanted = pages.wants_json(dict(scope["headers"]))
        if scope["type"] == "http" and scope["path"] == gate.TICKET_PATH:
            await self.redeem(scope, send, public_id)
            return
        t = await self.target(public_id)
        if t is None:
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 4404})
                return
            await _reply(
                send,
                *pages.answer(
                    404,
                    "not_found",
                    "No such preview.",
                    json_wanted=json_wanted,
                    title="No such preview",
                ),
            )
            return
        if not t.public and self.guard:
            send = framed(send, berth_origins(app_url(scope)))
            why = refusal(
                scope["headers"],
                scope.get("method", "GET"),
                scope["type"] == "websocket",
                self.own_origin(scope),
            )
            if why is not None:
                if scope["type"] == "websocket":
                    # Refused before the handshake: daphne answers it 403 (ASGI gives a
                    # refused handshake no body; the gateway's refusal has one).
                    await send({"type": "websocket.close", "code": 4403})
                    return
                await _reply(
                    send,
                    *pages.answer(
                        403,
                        REFUSED,
                        why,
                        json_wanted=json_wanted,
                        title="Refused: a request from another site",
                    ),
                )
                return
        if not await self.allowed(scope, t):
            await self.refuse(scope, send, t, json_wanted)
            return
        if scope["type"] == "websocket":
            # Open while its viewer may see the target (previews.tunnel_access).
            cookie, tunnelled = viewer_cookie(_cookies(scope)), t
            await self.counted(
                t,
                send,
                lambda: proxy_websocket(
                    scope,
                    receive,
                    send,
                    tunnelled,
                    lambda: tunnel_access.watch(self, tunnelled, cookie),
                ),
            )
            return
        body = await _read_body(receive)
        if body is None:
            await _reply(
                send,
                *pages.answer(
                    413,
                    "too_large",
                    f"Request bodies to a preview are capped at "
                    f"{settings.PREVIEW_MAX_BODY_BYTES // (1024 * 1024)} MB (PREVIEW_MAX_BODY_MB).",
                    json_wanted=json_wanted,
                    title="Request too large",
                ),
            )
            return
        if not t.ready:
            t = await self.target(public_id, fresh=True) or t
        if t.coming_up:
            held = await self.counted(t, send, lambda: self.hold(t))
            if held is None:
                return  # too many at once: answered preview_busy
            t = held
        if not t.ready:
            # The app's log is the team's: a public address shows the state, not the log.
            lines = (
                await database_sync_to_async(gate.last_lines)(t.run_id)
                if t.state in ("failed", "crashed") and not t.public
                else []
            )
            await _reply(send, *pages.not_ready(t, app_url(scope), lines, json_wanted))
            return
        await self.touch(t)
        await self.counted(t, send, lambda: self.forward(scope, send, t, body, json_wanted))

    def own_origin(self, scope: dict[str, Any]) -> str:
        return own_origin(
            "https" if self.tls else scope.get("scheme", "http"), _header(scope, b"host").lower()
        )

    async def hold(self, t: gate.Target) -> gate.Target:
        """A request to a preview on its way up waits for it (up to PREVIEW_HOLD_S),
        woken by each move of the preview rather than asking the database in a loop;
        then it goes on as the preview is by then (ready: to the app)."""
        if settings.PREVIEW_HOLD_S <= 0:
            return t
        loop = asyncio.get_running_loop()
        deadline = loop.time() + settings.PREVIEW_HOLD_S
        try:
            async with fanout.listening(gate.moves_group(t.public_id)) as next_signal:
                t = await self.target(t.public_id, fresh=True) or t
                while t.coming_up and (left := deadline - loop.time()) > 0:
                    # Also a look every HOLD_RECHECK_S: a namespace recorded after the
                    # move (ready, not yet reachable) sends no signal of its own.
                    await next_signal(min(left, HOLD_RECHECK_S))
                    t = await self.target(t.public_id, fresh=True) or t
        except Exception as e:  # no channel layer (Redis down): answer as things are
            log.warning("preview %s: not holding a request: %r", t.public_id, e)
        return t

    async def counted(self, t: gate.Target, send: Any, work: Any) -> Any:
        """At most PREVIEW_MAX_CONNECTIONS requests (held ones too) and WebSockets per
        preview at once; `work`'s result, or None when refused."""
        if self.open.get(t.public_id, 0) >= settings.PREVIEW_MAX_CONNECTIONS:
            await _reply(
                send,
                *pages.answer(
                    503,
                    "preview_busy",
                    "This preview has too many open connections; try again shortly.",
                    json_wanted=True,
                ),
            )
            return None
        self.open[t.public_id] = self.open.get(t.public_id, 0) + 1
        try:
            return await work()
        finally:
            self.open[t.public_id] -= 1

    async def redeem(self, scope: dict[str, Any], send: Any, public_id: str) -> None:
        query = parse_qs(scope["query_string"].decode("latin-1"))
        nonce = (query.get("t") or [""])[-1]
        target = (query.get("next") or ["/"])[-1]
        if not target.startswith("/") or target.startswith("//") or "\\" in target:
            target = "/"  # only a path on this same host: never an open redirect
        cookie = await database_sync_to_async(gate.redeem)(nonce, public_id) if nonce else None
        if cookie is None:
            await _reply(
                send,
                *pages.answer(
                    403,
                    "ticket_invalid",
                    "This link was already used, has expired, or is for "
                    "another preview. Open the preview from Berth again for a new one.",
                    json_wanted=pages.wants_json(dict(scope["headers"])),
                    title="Link expired",
                ),
            )
            return
        await send(
            {
                "type": "http.response.start",
                "status": 302,
                "headers": [
                    (b"location", target.encode()),
                    (b"cache-control", b"no-store"),
                    (b"referrer-policy", b"no-referrer"),
                    *gate.cookie_headers(cookie),
                ],
            }
        )
        await send({"type": "http.response.body", "body": b""})

    async def refuse(
        self, scope: dict[str, Any], send: Any, t: gate.Target, json_wanted: bool
    ) -> None:
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 4401})
            return
        open_url = f"{app_url(scope)}/previews/{t.public_id}/open"
        if not json_wanted and scope["method"] in ("GET", "HEAD"):
            path = scope.get("raw_path") or scope["path"].encode()
            qs = scope["query_string"]
            nxt = path.decode("latin-1") + (("?" + qs.decode("latin-1")) if qs else "")
            await send(
                {
                    "type": "http.response.start",
                    "status": 302,
                    "headers": [
                        (b"location", f"{open_url}?next={quote(nxt, safe='')}".encode()),
                        (b"cache-control", b"no-store"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": b""})
            return
        await _reply(
            send,
            *pages.answer(
                401,
                "preview_sign_in_required",
                "This preview is private to its team. Open it "
                f"from Berth ({open_url}), or ask POST /api/v1/previews/{t.public_id}/link for a "
                "link.",
                json_wanted=json_wanted,
                title="Sign in to see this preview",
            ),
        )

    # -- forwarding --------------------------------------------------------------------

    async def forward(
        self, scope: dict[str, Any], send: Any, t: gate.Target, body: bytes, json_wanted: bool
    ) -> None:
        assert t.ns is not None
        request = h11.Request(
            method=scope["method"],
            target=gate.request_target(scope),
            headers=request_headers(scope, body),
        )
        started = False
        for attempt in (1, 2):
            try:
                upstream = await self.pool.get(t.ns, t.port)
            except NamespaceGone:
                self.targets.pop(t.public_id, None)
                self.pool.drop(t.ns)
                await _reply(
                    send,
                    *pages.answer(
                        503,
                        "preview_stopped",
                        "The preview's sandbox is gone; it is stopping.",
                        json_wanted=json_wanted,
                        title="This preview is stopping",
                    ),
                )
                return
            except (OSError, TimeoutError):
                await _reply(
                    send,
                    *pages.answer(
                        502,
                        "app_not_listening",
                        f"Nothing accepted a connection on port "
                        f"{t.port} inside the preview; the app may be restarting or crashed.",
                        json_wanted=json_wanted,
                        title="The app did not answer",
                    ),
                )
                return
            try:
                started = await self.exchange(upstream, request, body, send)
                self.pool.put(t.ns, t.port, upstream)
                return
            except (UpstreamClosed, ConnectionError) as e:
                upstream.close()
                if started:
                    return  # the status is sent: all that is left is to end the body
                if attempt == 1 and upstream.used:
                    continue  # a kept-alive connection the app had closed: once more
                message = f"The app closed the connection without answering ({e})."
            except TimeoutError:
                upstream.close()
                if started:
                    return
                await _reply(
                    send,
                    *pages.answer(
                        504,
                        "app_timeout",
                        f"The app sent nothing for {settings.PREVIEW_IDLE_CONNECTION_S} s.",
                        json_wanted=json_wanted,
                        title="The app took too long",
                    ),
                )
                return
            except BaseException:
                upstream.close()
                raise
            await _reply(
                send,
                *pages.answer(
                    502,
                    "app_broke_request",
                    message,
                    json_wanted=json_wanted,
                    title="The app broke this request",
                ),
            )
            return

    async def exchange(
        self, upstream: Upstream, request: h11.Request, body: bytes, send: Any
    ) -> bool:
        """One request and its streamed answer; returns whether the status was sent."""
        timeout = settings.PREVIEW_IDLE_CONNECTION_S
        await upstream.send(request)
        if body:
            await upstream.send(h11.Data(data=body))
        await upstream.send(h11.EndOfMessage())
        event = await upstream.next_event(timeout)
        while isinstance(event, h11.InformationalResponse):  # 100 Continue, 103 hints
            event = await upstream.next_event(timeout)
        if not isinstance(event, h11.Response):
            raise UpstreamClosed(f"unexpected {type(event).__name__}")
        await send(
            {
                "type": "http.response.start",
                "status": event.status_code,
                "headers": response_headers(event.headers, upstream_host(request)),
            }
        )
        # Flow control only where a body may outgrow a socket buffer: most answers are
        # small and declare it, and registering a producer costs each request.
        length = dict(event.headers).get(b"content-length", b"")
        flow = (
            Backpressure()
            if length.isdigit() and int(length) <= SMALL_BODY
            else Backpressure.of(send)
        )
        try:
            while True:
                event = await upstream.next_event(timeout)
                if isinstance(event, h11.Data):
                    await send(
                        {"type": "http.response.body", "body": bytes(event.data), "more_body": True}
                    )
                    await flow.wait()
                    if flow.gone:
                        raise UpstreamClosed("the client went away")
                elif isinstance(event, h11.EndOfMessage):
                    break
        except (UpstreamClosed, ConnectionError, TimeoutError):
            flow.release()
            await send({"type": "http.response.body", "body": b""})
            raise
        flow.release()
        await send({"type": "http.response.body", "body": b""})
        return True


# -- helpers -------------------------------------------------------------------------


def _header(scope: dict[str, Any], name: bytes) -> str:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return ""


def _cookies(scope: dict[str, Any]) -> dict[str, str]:
    header = b"; ".join(v for k, v in scope["headers"] if k == b"cookie")
    return parse_cookies(header) if header else {}


def app_url(scope: dict[str, Any]) -> str:
    """Where Berth's app is, for links from a preview host: APP_URL, else localhost on
    the port this request came in on (the default PREVIEW_DOMAIN is a *.localhost)."""
    if settings.APP_URL:
        return str(settings.APP_URL).rstrip("/")
    port = (scope.get("server") or ("", 80))[1]
    return f"{scope.get('scheme', 'http')}://localhost" + (f":{port}" if port != 80 else "")


def upstream_host(request: h11.Request) -> str:
    for key, value in request.headers:
        if key == b"host":
            return str(value.decode("latin-1")).split(":")[0].lower()
    return ""


def request_headers(scope: dict[str, Any], body: bytes) -> list[tuple[bytes, bytes]]:
    client = (scope.get("client") or ("", 0))[0]
    headers = forwarded_headers(scope["headers"], str(client), scope.get("scheme", "http"))
    if body or scope["method"] in ("POST", "PUT", "PATCH"):
        headers.append((b"content-length", str(len(body)).encode()))
    return headers


def framed(send: Any, berth: bytes) -> Any:
    """`send`, with every answer's head drawn in a frame only by Berth's pages (or the
    target's own): for a non-public target, whatever answers it, app or Berth."""

    async def framed_send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": with_frame_ancestors(list(message["headers"]), berth)}
        await send(message)

    framed_send.__wrapped__ = send  # type: ignore[attr-defined]  # for Backpressure.of
    return framed_send


async def _read_body(receive: Any) -> bytes | None:
    """The whole request body, or None past PREVIEW_MAX_BODY_BYTES."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b""
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > settings.PREVIEW_MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


async def _reply(send: Any, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*headers, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


PROXY: Proxy | None = None


def proxy() -> Proxy:
    global PROXY
    if PROXY is None:
        PROXY = Proxy()
    return PROXY
