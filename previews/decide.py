"""The web process's part in serving preview and release hosts: it decides, the
preview gateway serves. Nothing here connects into a sandbox.

`config.routing.route_by_host` sends those hosts here before Django sees them, and
only when the preview gateway asks (its key in X-Berth-Gateway, gate.from_gateway);
anyone else is told to use the gateway's port (421). The gateway asks about each
request it cannot decide from its own caches, sending the request's head without its
body; the answer is either the gateway's to send on as it is, or the verdict "serve
it" (204 with gate.VERDICT: the target), which the gateway carries out itself:
1. `/__berth/ticket?t=…&next=/…` exchanges a single-use ticket for the preview's
   cookie (previews.gate) and redirects to `next` on the same host;
2. a non-public preview or release takes no request from another site's pages but a
   navigation, and is framed by Berth's pages only (previews.headers: `refusal`, 403
   `cross_origin_refused`, and `with_frame_ancestors` on every answer);
3. a private preview needs that cookie (a browser without it is sent to the app's
   `/previews/<id>/open`, which checks access and comes back with a ticket);
4. a request to a preview on its way up is held until it is ready (PREVIEW_HOLD_S);
   one that is not ready by then gets a typed answer (previews.pages), 503;
5. for a WebSocket handshake (X-Berth-Upgrade) the verdict's answer stays open while
   its viewer may see the target, and ends with the close code the gateway is to
   close the tunnel with once they may not (previews.tunnel_access).
"""

import asyncio
import contextlib
import logging
from typing import Any
from urllib.parse import parse_qs, quote

from channels.db import database_sync_to_async
from django.conf import settings

from core import fanout
from previews import gate, of_sessions, pages, tunnel_access
from previews.headers import (
    REFUSED,
    berth_origins,
    own_origin,
    parse_cookies,
    refusal,
    viewer_cookie,
    with_frame_ancestors,
)
from previews.lookups import Lookups
from previews.models import FAILED_STATES, PreviewState
from sessions.models import LIVE_STATES as SESSION_LIVE_STATES
from sessions.models import SessionState
from sessions.waiting import wait_for_session

log = logging.getLogger("berth.previews")

HOLD_RECHECK_S = 1.0
# A session resumed for a request is waited for until it is ready, or no longer live.
RESUMED_STATES = (
    SessionState.READY,
    *(s for s in SessionState.values if s not in SESSION_LIVE_STATES),
)
Answer = tuple[int, list[tuple[bytes, bytes]], bytes]


class Decider:
    """The web process's lookups (cached like the gateway's) and its held requests."""

    def __init__(self) -> None:
        self.lookups = Lookups()
        self.following: asyncio.Task[None] | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if self.following is None:
            # Its viewer answers are dropped when told, as the gateways' are (a grant, a
            # revocation): else a gateway that forgot one would be told "serve it" again
            # from here. Started with the first request: daphne has no start-up hook.
            self.following = asyncio.ensure_future(
                self.lookups.follow((gate.VIEWERS_GROUP,), self.heard)
            )
        host = _header(scope, b"host").lower()
        if scope["type"] != "http" or not scope.get("berth.gateway"):
            await self.misdirected(scope, send)
            return
        public_id = self.lookups.preview_of(host)
        if public_id is None:
            release = self.lookups.release_of(host)
            assert release is not None  # route_by_host sends only these hosts here
            public_id = await self.lookups.route(release)
            if public_id is None:
                await _reply(
                    send,
                    *self.refused(
                        scope,
                        404,
                        "no_release",
                        "Nothing is released at this address yet: ask for a "
                        "deploy and have a reviewer approve it.",
                        "No release",
                    ),
                )
                return
        await self.decide(scope, receive, send, public_id)

    async def heard(self, message: dict[str, Any]) -> None:
        if message.get("type") == "viewers.drop":
            self.lookups.told(message)

    async def decide(self, scope: dict[str, Any], receive: Any, send: Any, public_id: str) -> None:
        websocket = bool(scope.get("berth.upgrade"))
        if scope["path"] == gate.TICKET_PATH and not websocket:
            await self.redeem(scope, send, public_id)
            return
        since = self.lookups.generation  # what the answers below rest on (Lookups.drop)
        t = await self.lookups.target(public_id)
        if t is None:
            await _reply(send, *self.refused(scope, 404, "not_found", "No such preview."))
            return
        if not t.public and self.lookups.guard:
            send = framed(send, berth_origins(app_url(scope)))
            why = refusal(
                scope["headers"],
                scope["method"],
                websocket,
                own_origin(
                    "https" if self.lookups.tls else scope.get("scheme", "http"), _host(scope)
                ),
            )
            if why is not None:
                title = "Refused: a request from another site"
                await _reply(send, *self.refused(scope, 403, REFUSED, why, title))
                return
        cookie = viewer_cookie(_cookies(scope))
        if not t.public and not await self.lookups.viewer(cookie, t, since):
            await self.refuse(scope, send, t)
            return
        if t.session and not t.ready and t.state in (PreviewState.STARTING, PreviewState.READY):
            # A preview of a session that may be freezing or frozen (or was, a moment
            # ago): never forwarded into a paused container, the session resumes first.
            t = await self.lookups.target(public_id, fresh=True) or t
            if t.paused:
                t = await self.resume(t)
                if t.paused:
                    await _reply(send, *self.not_resumed(scope, t))
                    return
        if websocket:
            await self.tunnel(scope, receive, send, t, cookie)
            return
        if not t.ready:
            t = await self.lookups.target(public_id, fresh=True) or t
        if t.coming_up:
            if self.lookups.open.get(t.public_id, 0) >= settings.PREVIEW_MAX_CONNECTIONS:
                await _reply(send, *busy())
                return
            self.lookups.open[t.public_id] = self.lookups.open.get(t.public_id, 0) + 1
            try:
                t = await self.hold(t)
            finally:
                self.lookups.open[t.public_id] -= 1
        if not t.ready:
            # The app's log is the team's: a public address shows the state, not the log.
            lines = (
                await database_sync_to_async(gate.last_lines)(t.run_id)
                if t.state in FAILED_STATES and not t.public
                else []
            )
            json_wanted = pages.wants_json(dict(scope["headers"]))
            await _reply(send, *pages.not_ready(t, app_url(scope), lines, json_wanted))
            return
        await send({"type": "http.response.start", "status": 204, "headers": verdict(t)})
        await send({"type": "http.response.body", "body": b""})

    async def tunnel(
        self, scope: dict[str, Any], receive: Any, send: Any, t: gate.Target, cookie: str | None
    ) -> None:
        """A WebSocket's verdict: open while its viewer may see the target; the close
        code as the answer's body once they may not (or the gateway hangs up)."""
        if not t.ready:
            await _reply(send, *self.refused(scope, 403, "preview_not_ready", "Not ready."))
            return
        await send({"type": "http.response.start", "status": 200, "headers": verdict(t)})
        await send({"type": "http.response.body", "body": b"", "more_body": True})

        async def hung_up() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        watch = asyncio.ensure_future(tunnel_access.watch(self.lookups, t, cookie))
        gone = asyncio.ensure_future(hung_up())
        try:
            await asyncio.wait([watch, gone], return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            if not watch.done():
                watch.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watch
        if not watch.cancelled():
            await send({"type": "http.response.body", "body": b"%d" % watch.result()})

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
                t = await self.lookups.target(t.public_id, fresh=True) or t
                while t.coming_up and (left := deadline - loop.time()) > 0:
                    # Also a look every HOLD_RECHECK_S: a namespace recorded after the
                    # move (ready, not yet reachable) sends no signal of its own.
                    await next_signal(min(left, HOLD_RECHECK_S))
                    t = await self.lookups.target(t.public_id, fresh=True) or t
        except Exception as e:  # no channel layer (Redis down): answer as things are
            log.warning("preview %s: not holding a request: %r", t.public_id, e)
        return t

    async def resume(self, t: gate.Target) -> gate.Target:
        """The session of `t` resumed for this request (it is activity), waited for up
        to SESSION_PREVIEW_RESUME_S; the target as it is then."""
        if self.lookups.open.get(t.public_id, 0) >= settings.PREVIEW_MAX_CONNECTIONS:
            return t
        self.lookups.open[t.public_id] = self.lookups.open.get(t.public_id, 0) + 1
        try:
            if await database_sync_to_async(of_sessions.resume_for_request)(t.session):
                await wait_for_session(t.session, RESUMED_STATES, settings.SESSION_PREVIEW_RESUME_S)
        except Exception as e:  # no channel layer (Redis down): answer as things are
            log.warning("preview %s: its session did not resume: %r", t.public_id, e)
        finally:
            self.lookups.open[t.public_id] -= 1
        return await self.lookups.target(t.public_id, fresh=True) or t

    def not_resumed(self, scope: dict[str, Any], t: gate.Target) -> Answer:
        message = (
            f"Session {t.session}, which runs this preview's app, is {t.session_state} and "
            f"did not resume within {settings.SESSION_PREVIEW_RESUME_S:g} s; try again, "
            f"or look at it (GET /api/v1/sessions/{t.session})."
        )
        if scope.get("berth.upgrade"):
            return pages.answer(503, "session_not_resumed", message, json_wanted=True)
        return pages.answer(
            503,
            "session_not_resumed",
            message,
            json_wanted=pages.wants_json(dict(scope["headers"])),
            title="This preview's session is frozen",
            detail={"session": t.session, "session_state": t.session_state},
            refresh=True,
        )

    async def redeem(self, scope: dict[str, Any], send: Any, public_id: str) -> None:
        query = parse_qs(scope["query_string"].decode("latin-1"))
        nonce = (query.get("t") or [""])[-1]
        target = (query.get("next") or ["/"])[-1]
        if not target.startswith("/") or target.startswith("//") or "\\" in target:
            target = "/"  # only a path on this same host: never an open redirect
        cookie = await database_sync_to_async(gate.redeem)(nonce, public_id) if nonce else None
        if cookie is None:
            message = (
                "This link was already used, has expired, or is for "
                "another preview. Open the preview from Berth again for a new one."
            )
            await _reply(send, *self.refused(scope, 403, "ticket_invalid", message, "Link expired"))
            return
        headers = [
            (b"location", target.encode()),
            (b"cache-control", b"no-store"),
            (b"referrer-policy", b"no-referrer"),
            *gate.cookie_headers(cookie),
        ]
        await send({"type": "http.response.start", "status": 302, "headers": headers})
        await send({"type": "http.response.body", "body": b""})

    async def refuse(self, scope: dict[str, Any], send: Any, t: gate.Target) -> None:
        """No cookie that lets this viewer in: a browser is sent to sign in, a script
        told how to get a link. A token's cookie that does not cover the secrets granted
        to the preview's session gets the session's own answer (sessions.access)."""
        open_url = f"{app_url(scope)}/previews/{t.public_id}/open"
        cookie = viewer_cookie(_cookies(scope))
        if cookie and self.lookups.refused.get((t.public_id, cookie)) == gate.CLOSE_GRANT:
            message = (
                f"Execs in session {t.session} were granted secrets ({', '.join(t.secrets)}), "
                "and its preview serves what the session runs: seeing it needs a token whose "
                "secret list includes them (ask an admin for one), or open it from Berth "
                f"signed in ({open_url})."
            )
            title = "This preview needs the session's secret grants"
            await _reply(send, *self.refused(scope, 403, "secret_grant_required", message, title))
            return
        json_wanted = pages.wants_json(dict(scope["headers"]))
        browser = not scope.get("berth.upgrade") and not json_wanted
        if browser and scope["method"] in ("GET", "HEAD"):
            path = scope.get("raw_path") or scope["path"].encode()
            qs = scope["query_string"]
            nxt = path.decode("latin-1") + (("?" + qs.decode("latin-1")) if qs else "")
            headers = [
                (b"location", f"{open_url}?next={quote(nxt, safe='')}".encode()),
                (b"cache-control", b"no-store"),
            ]
            await send({"type": "http.response.start", "status": 302, "headers": headers})
            await send({"type": "http.response.body", "body": b""})
            return
        message = (
            "This preview is private to its team. Open it "
            f"from Berth ({open_url}), or ask POST /api/v1/previews/{t.public_id}/link for a "
            "link."
        )
        title = "Sign in to see this preview"
        await _reply(send, *self.refused(scope, 401, "preview_sign_in_required", message, title))

    def refused(
        self, scope: dict[str, Any], status: int, code: str, message: str, title: str = ""
    ) -> Answer:
        """A typed answer; a refused WebSocket handshake is a 403, in the error shape
        (as a WebSocket closed before it was accepted always was)."""
        if scope.get("berth.upgrade"):
            return pages.answer(403, code, message, json_wanted=True)
        json_wanted = pages.wants_json(dict(scope["headers"]))
        return pages.answer(status, code, message, json_wanted=json_wanted, title=title)

    async def misdirected(self, scope: dict[str, Any], send: Any) -> None:
        """Preview and release hosts are the preview gateway's: only it connects into
        sandboxes, and only it may ask here."""
        message = (
            "Previews and releases are served on the preview gateway's port "
            f"({settings.PREVIEW_PORT or 'PREVIEW_PORT'}), not on Berth's own."
        )
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 4421})
            return
        await _reply(
            send,
            *pages.answer(
                421,
                "not_served_here",
                message,
                json_wanted=pages.wants_json(dict(scope["headers"])),
                title="Misdirected request",
            ),
        )


def busy() -> Answer:
    return pages.answer(
        503,
        "preview_busy",
        "This preview has too many open connections; try again shortly.",
        json_wanted=True,
    )


def verdict(t: gate.Target) -> list[tuple[bytes, bytes]]:
    return [(gate.VERDICT, t.verdict()), (b"cache-control", b"no-store")]


def _header(scope: dict[str, Any], name: bytes) -> str:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return ""


def _host(scope: dict[str, Any]) -> str:
    return _header(scope, b"host").lower()


def _cookies(scope: dict[str, Any]) -> dict[str, str]:
    header = b"; ".join(v for k, v in scope["headers"] if k == b"cookie")
    return parse_cookies(header) if header else {}


def app_url(scope: dict[str, Any]) -> str:
    """Where Berth's app is, for links from a preview host: APP_URL, else localhost on
    the port this request came in on (the default PREVIEW_DOMAIN is a *.localhost)."""
    if settings.APP_URL_GIVEN:
        return str(settings.APP_URL).rstrip("/")
    port = (scope.get("server") or ("", 80))[1]
    return f"{scope.get('scheme', 'http')}://localhost" + (f":{port}" if port != 80 else "")


def framed(send: Any, berth: bytes) -> Any:
    """`send`, with every answer's head drawn in a frame only by Berth's pages: for a
    non-public target, whatever answers it."""

    async def framed_send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": with_frame_ancestors(list(message["headers"]), berth)}
        await send(message)

    return framed_send


async def _reply(send: Any, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*headers, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


DECIDER: Decider | None = None


def decider() -> Decider:
    global DECIDER
    if DECIDER is None:
        DECIDER = Decider()
    return DECIDER
