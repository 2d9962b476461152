"""The preview gateway: a process of its own serving preview and release hosts on
PREVIEW_PORT (`manage.py preview_gateway`). It alone connects into sandboxes (HTTP,
WebSocket tunnels, held requests); the web process only decides (previews.decide).

Why a process of its own: a proxy inside daphne tops out near 3,300 small requests a
second on this kind of machine (ASGI messages, h11 and a coroutine per request),
against ~75,000 straight into the sandbox. Here a request is parsed by llhttp
(httptools) and forwarded from the protocol callbacks, with no task and no ASGI hop.

What it decides itself (the fast path): a plain HTTP request to a ready preview whose
cookie its caches allow (previews.lookups), forwarded under the header rules of
previews.headers: Berth's cookies and any Authorization removed, X-Forwarded-* from
the real connection, hop-by-hop headers and foreign Set-Cookie dropped, redirects
passed back untouched, bodies streamed both ways under backpressure; for a non-public
target, another site's requests refused (a WebSocket too) and every answer framed by
Berth's pages only.

Everything else it asks the web process about on the same connection (previews.relay),
sending the request's head (never its body), naming the real client in X-Berth-Client,
signed by X-Berth-Gateway (gate.from_gateway): the ticket exchange, a request without
a known cookie, a preview that is not ready (typed pages, the hold), a WebSocket
handshake, a release host not yet looked up. The answer is sent on as it is, or it is
the verdict "serve it" (gate.VERDICT), and the gateway forwards the request (body and
all) into the sandbox itself. A WebSocket's verdict stays open while its viewer may see
the target (previews.tunnel).
"""

import asyncio
import logging
import time
from typing import Any

from django.conf import settings

from previews import gate
from previews.framing import Parsed
from previews.headers import (
    REFUSED,
    berth_origins,
    own_origin,
    parse_cookies,
    refusal,
    viewer_cookie,
)
from previews.lookups import TARGET_TTL_S, TOUCH_EVERY_S, Lookups
from previews.nav_signal import navigated
from sandbox.netns import Namespace, connect
from sessions.lifecycle import GATEWAYS_GROUP

log = logging.getLogger("berth.previews")

KEEP_IDLE = 64  # idle upstream connections kept per sandbox (and to the web process)


class Route:
    """Where one request goes: the sandbox of `target`, the web process (to ask it what
    to do), or an answer of the gateway's own (`status`, `code`, `message`).

    A plain class with its pool key worked out once: a route into a ready preview is
    made once per cached target (Gateway.into), not once per request."""

    __slots__ = ("code", "key", "kind", "message", "status", "target", "title")

    def __init__(
        self,
        kind: str,  # "sandbox" | "app" | "answer"
        target: gate.Target | None = None,
        status: int = 0,
        code: str = "",
        message: str = "",
        title: str = "",
    ) -> None:
        self.kind = kind
        self.target = target
        self.status = status
        self.code = code
        self.message = message
        self.title = title
        # Which kept connections serve this route: the sandbox's port (its namespace
        # by pid and inode: plain ints hash in C), or the app's.
        if kind == "sandbox":
            assert target is not None and target.ns is not None
            self.key: Any = (target.ns.pid, target.ns.inode, target.port)
        else:
            self.key = "app"

    def about(self, target: gate.Target) -> "Route":
        """The same answer, about `target` (its frame-ancestors)."""
        return Route(self.kind, target, self.status, self.code, self.message, self.title)


APP = Route("app")
BUSY = Route(
    "answer",
    status=503,
    code="preview_busy",
    message="This preview has too many open connections; try again shortly.",
)
# Berth itself is not served here: the web process would see every client as the
# gateway (one sign-in throttle for all), and the gateway names clients only for
# preview and release hosts.
MISDIRECTED = Route(
    "answer",
    status=421,
    code="not_a_preview_host",
    message="This port serves previews and releases only: use a preview's "
    "or a release's address, or Berth's own port for Berth.",
)
LOOK_UP = ""  # a release host whose route is not known lately
# What a route into a sandbox rests on (Gateway.settled): the request (its Parsed), the
# route, and the cache entries decide read: the target's, the viewer's (its key and
# entry; non-public targets), a release host's route (its key and entry).
Settled = tuple[
    Parsed,
    Route,
    tuple[float, gate.Target | None] | None,
    tuple[tuple[str, str], tuple[float, bool] | None] | None,
    tuple[tuple[str, str], tuple[float, str | None] | None] | None,
]
TICKET_PATH = gate.TICKET_PATH.encode()
TICKET_QUERY = TICKET_PATH + b"?"
CACHED = 10_000  # entries a memo of the gateway's keeps before it starts again


class Gateway:
    """State shared by every connection: the lookups' caches, idle upstreams, counts."""

    def __init__(self, app: tuple[str, int]) -> None:
        self.app = app
        self.lookups = Lookups()
        self.key = gate.gateway_key()
        self.idle: dict[Any, list[Any]] = {}
        self.hosts: dict[str, tuple[str | None, tuple[str, str] | None, str]] = {}
        self.routes: dict[str, Route] = {}  # into each cached target (`into`)
        self.cookies: dict[bytes, str | None] = {}  # Cookie headers' preview cookies
        # Read once: Django's settings object costs a lookup per attribute per request.
        self.max_connections = settings.PREVIEW_MAX_CONNECTIONS
        self.viewer_ttl = self.lookups.viewer_ttl
        self.max_body = settings.PREVIEW_MAX_BODY_BYTES
        self.too_large = Route(
            "answer",
            status=413,
            code="too_large",
            title="Request too large",
            message=f"Request bodies to a preview are capped at "
            f"{self.max_body // (1024 * 1024)} MB (PREVIEW_MAX_BODY_MB).",
        )
        # Behind a TLS proxy (BEHIND_TLS_PROXY) every request came in over https.
        self.scheme = "https" if self.lookups.tls else "http"
        self.guard = self.lookups.guard
        # Who may frame a non-public target: Berth's pages, on the web process's port
        # unless APP_URL says where Berth is (as previews.decide's app_url does).
        self.frames = berth_origins(
            settings.APP_URL.rstrip("/") if settings.APP_URL_GIVEN else f"http://localhost:{app[1]}"
        )

    # -- deciding ----------------------------------------------------------------------

    def decide(self, ex: Any) -> Route | None:
        """The route from what the caches know now; None when a lookup is needed first."""
        named = self._named(ex.host)
        public_id = named[0] if named[0] is not None else self._released(named[1])
        if public_id is MISDIRECTED:
            return MISDIRECTED
        target = ex.target
        if (
            public_id is None
            or not target.startswith(b"/")
            or target == TICKET_PATH
            or target.startswith(TICKET_QUERY)
        ):
            return APP  # nothing released there, or a request the web process answers
        if public_id == LOOK_UP:
            return None
        now = time.monotonic()
        cached = self.lookups.targets.get(public_id)
        if not cached or now - cached[0] >= 2 * TARGET_TTL_S:
            return None
        t = cached[1]
        if now - cached[0] >= TARGET_TTL_S and public_id not in self.lookups.pending:
            # Past its second: looked up again in the background while this request
            # goes on as the preview was (at most 2 s ago), so a busy preview's
            # requests do not all stall on one lookup each second.
            asyncio.get_running_loop().create_task(self._refresh(public_id))
        # A request without Origin or Sec-Fetch-* (ex.fetch_meta) is never refused
        # (previews.headers.refusal): the rules are read only when there is one.
        if ex.fetch_meta and t is not None and not t.public and self.guard:
            # Here too, not only in the web process it hands the rest to: a refused
            # WebSocket then gets Berth's error shape, which daphne cannot give it.
            why = refusal(ex.headers, ex.method.decode("latin-1"), ex.upgrade, named[2])
            if why is not None:
                return Route("answer", t, 403, REFUSED, why, "Refused: a request from another site")
        if t is None or not t.ready or ex.upgrade:
            return APP  # typed pages, the hold, WebSockets (and their watch): ask
        if not t.public:
            value = self._viewer_value(ex.cookie)
            if not value:
                return APP
            seen = self.lookups.viewers.get((t.public_id, value))
            if not seen or now - seen[0] >= self.viewer_ttl:
                return None
            if not seen[1]:
                return APP
            self.frame_navigation(ex, t)
        return self.admit(ex, t)

    def frame_navigation(self, ex: Any, t: gate.Target) -> None:
        """A navigation of a viewer's frame (Berth's preview pane): told to that viewer's
        address bars, which cannot read a cross-origin frame's location themselves."""
        if not ex.fetch_meta or ex.method != b"GET":
            return
        dest = mode = None
        for key, value in ex.headers:
            if key == b"sec-fetch-dest":
                dest = value
            elif key == b"sec-fetch-mode":
                mode = value
        if dest == b"iframe" and mode == b"navigate":
            user = gate.cookie_user(self._viewer_value(ex.cookie))
            if user is not None:
                navigated(t.public_id, user, ex.target)

    def settled(self, ex: Any, route: Route | None) -> Settled | None:
        """What `route`, decide's for `ex`, rests on, when it leads into a sandbox and
        `ex` is a request that may come again (its Parsed): the cache entries decide
        read (the target, the viewer's answer, a release host's route), so that a
        repeat is decided again from them alone (`again`)."""
        if route is None or route.kind != "sandbox" or ex.parsed_from is None:
            return None
        t = route.target
        assert t is not None
        viewer = release = None
        if not t.public:
            key = (t.public_id, self._viewer_value(ex.cookie) or "")
            viewer = (key, self.lookups.viewers.get(key))
        named = self._named(ex.host)
        if named[0] is None and named[1] is not None:
            release = (named[1], self.lookups.routes.get(named[1]))
        return (ex.parsed_from, route, self.lookups.targets.get(t.public_id), viewer, release)

    def again(self, settled: Settled) -> Route | None:
        """The route decide gave a request, for a repeat of it (the same Parsed, so the
        same host, path, cookie and headers): while every cache entry it rested on is
        the same one still and within its time, decide would read the same again and
        come to the same route, so only the times and the connection cap are checked
        here. None: decide it anew (an entry moved on or aged, the cap is reached)."""
        _, route, target, viewer, release = settled
        t = route.target
        assert t is not None
        now = time.monotonic()
        lookups = self.lookups
        if (
            target is None
            or lookups.targets.get(t.public_id) is not target
            or now - target[0] >= TARGET_TTL_S
            or lookups.open.get(t.public_id, 0) >= self.max_connections
        ):
            return None
        if viewer is not None:
            seen = viewer[1]
            if seen is None or lookups.viewers.get(viewer[0]) is not seen:
                return None
            if now - seen[0] >= self.viewer_ttl:
                return None
        if release is not None:
            cached = release[1]
            if cached is None or lookups.routes.get(release[0]) is not cached:
                return None
            if now - cached[0] >= TARGET_TTL_S:
                return None
        return route

    def _viewer_value(self, cookie: bytes) -> str | None:
        """The preview cookie's value in a Cookie header (once per distinct header)."""
        if not cookie:
            return None
        try:
            return self.cookies[cookie]
        except KeyError:
            if len(self.cookies) > CACHED:
                self.cookies.clear()
            value = self.cookies[cookie] = viewer_cookie(parse_cookies(cookie))
            return value

    def admit(self, ex: Any, t: gate.Target) -> Route:
        """The route into `t`'s sandbox, unless it is at its connection cap or the
        request's body is past the cap."""
        if self.lookups.open.get(t.public_id, 0) >= self.max_connections:
            return BUSY.about(t)  # the target: its answer's frame-ancestors
        if ex.length > self.max_body:
            return self.too_large.about(t)
        return self.into(t)

    def into(self, t: gate.Target) -> Route:
        """The route into `t`'s sandbox: one per cached target, kept as long as it is."""
        route = self.routes.get(t.public_id)
        if route is None or route.target is not t:
            if len(self.routes) > CACHED:
                self.routes.clear()
            route = self.routes[t.public_id] = Route("sandbox", t)
        return route

    def verdict(self, ex: Any, value: bytes, since: int) -> gate.Target:
        """The web process said "serve it": the target it named, remembered as the
        caches' answers for the requests after this one (which then need no asking),
        unless this process was told to drop answers since it asked (`since`: its
        generation then), as the web process may have decided before it was."""
        t = gate.Target.of_verdict(value)
        now = time.monotonic()
        self.lookups.remember_target(t, t.public_id, now, since)
        cookie = viewer_cookie(parse_cookies(ex.cookie)) if ex.cookie else None
        if cookie and not t.public:
            self.lookups.remember_viewer(t.public_id, cookie, None, since)
            self.frame_navigation(ex, t)
        return t

    def frames_for(self, route: Route | None) -> bytes | None:
        """Who may frame an answer on `route` (frame-ancestors): Berth only, for a
        non-public target; None where that is the app's own business (or no target's)."""
        t = route.target if route is not None else None
        return self.frames if t is not None and not t.public and self.guard else None

    async def _refresh(self, public_id: str) -> None:
        try:
            await self.lookups.target(public_id, fresh=True)
        except Exception:
            log.exception("preview gateway: looking up preview %s failed", public_id)

    async def look_up(self, ex: Any) -> Route:
        """Fill the caches this request needs (from the database), then decide."""
        release = self.lookups.release_of(ex.host)
        if release:
            public_id = await self.lookups.route(release)
        else:
            public_id = self.lookups.preview_of(ex.host)
        if public_id is not None:
            since = self.lookups.generation
            t = await self.lookups.target(public_id)
            if t is not None and t.ready and not t.public and ex.cookie:
                await self.lookups.viewer(viewer_cookie(parse_cookies(ex.cookie)), t, since)
        return self.decide(ex) or APP  # a cache that expired meanwhile: the slow road

    def _named(self, host: str) -> tuple[str | None, tuple[str, str] | None, str]:
        """What a host names (a preview's public id, or a release host's workspace and
        team) and the origin its pages have: worked out once per host, not per request."""
        named = self.hosts.get(host)
        if named is None:
            if len(self.hosts) > CACHED:
                self.hosts.clear()
            preview = self.lookups.preview_of(host)
            release = self.lookups.release_of(host) if preview is None else None
            named = self.hosts[host] = (preview, release, own_origin(self.scheme, host))
        return named

    def _released(self, release: tuple[str, str] | None) -> Any:
        if not release:
            return MISDIRECTED
        cached = self.lookups.routes.get(release)
        if not cached or time.monotonic() - cached[0] >= TARGET_TTL_S:
            return LOOK_UP
        return cached[1]

    # -- while serving -----------------------------------------------------------------

    def opened(self, t: gate.Target) -> None:
        self.lookups.open[t.public_id] = self.lookups.open.get(t.public_id, 0) + 1
        now = time.monotonic()
        if now - self.lookups.touched.get(t.pk, 0) >= TOUCH_EVERY_S:
            # The idle clock: at most one write a second per preview, off the request.
            asyncio.get_running_loop().create_task(self.lookups.touch(t))

    def closed(self, t: gate.Target) -> None:
        self.lookups.open[t.public_id] -= 1

    # -- sessions being frozen (sessions.freeze), viewers losing access ------------------

    async def follow_signals(self, stop: asyncio.Event) -> None:
        """Told of each session about to be paused (a lost signal costs nothing worse
        than the lookup's second: the keeper waits longer than that), and of viewer
        answers to drop (a grant, a revocation: PREVIEW_VIEWER_TTL_S bounds a lost
        one), until `stop`."""
        await self.lookups.follow((GATEWAYS_GROUP, gate.VIEWERS_GROUP), self.heard, stop)

    async def heard(self, message: dict[str, Any]) -> None:
        if message.get("type") == "session.freezing":
            await self.session_freezing(str(message.get("session")))
        elif message.get("type") == "viewers.drop":
            # Requests on kept-alive connections are decided anew too (`again` finds
            # their viewer entry gone).
            for public_id in self.lookups.told(message):
                self.routes.pop(public_id, None)

    async def session_freezing(self, session: str) -> None:
        """Nothing more goes into the session's container on what was cached (its
        previews are looked up again, and found freezing); a request to it still open
        is activity now, which calls the freeze off."""
        previews = self.lookups.forget_session(session)
        for public_id in previews:
            self.routes.pop(public_id, None)
        if any(self.lookups.open.get(p, 0) > 0 for p in previews):
            await self.lookups.touch_session(session, time.monotonic())

    # -- upstream connections ------------------------------------------------------------

    def take(self, key: Any) -> Any:
        idle = self.idle.get(key)
        while idle:
            upstream = idle.pop()
            if upstream.open and not upstream.transport.is_closing():  # usable()
                return upstream
        return None

    def keep(self, key: Any, upstream: Any) -> None:
        idle = self.idle.get(key)
        if idle is None:
            idle = self.idle[key] = []
        if len(idle) < KEEP_IDLE:
            idle.append(upstream)
        else:
            upstream.close()

    def forget(self, key: Any, upstream: Any) -> None:
        idle = self.idle.get(key)
        if idle and upstream in idle:
            idle.remove(upstream)

    def forget_namespace(self, ns: Namespace) -> None:
        self.lookups.targets.clear()
        self.routes.clear()
        for key in [k for k in self.idle if k != "app" and k[:2] == (ns.pid, ns.inode)]:
            for upstream in self.idle.pop(key):
                upstream.close()

    async def open_upstream(self, route: Route, factory: Any) -> Any:
        loop = asyncio.get_running_loop()
        if route.kind == "sandbox":
            assert route.target is not None and route.target.ns is not None
            sock = await connect(route.target.ns, route.target.port)
            _, upstream = await loop.create_connection(factory, sock=sock)
        else:
            _, upstream = await asyncio.wait_for(loop.create_connection(factory, *self.app), 10)
        return upstream
