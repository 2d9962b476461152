"""The preview gateway's (previews.gateway) side toward the browser, an asyncio
protocol around llhttp (httptools): `Client` parses requests, routes each (the fast
path to a sandbox, or a question to the web process first), and answers them in order;
the side toward the app is previews.relay_upstream, a WebSocket is previews.tunnel's.

Framing is previews.framing's. Backpressure both ways: a side whose send buffer
passes HIGH_WATER stops the other side's reading until it drains, so a 50 MB answer
never sits in memory.

What a repeated request or answer skips is previews.relay_repeat's.
"""

import asyncio
import contextlib
import logging
from collections import deque
from typing import Any

import httptools
from django.conf import settings

from previews import tunnel
from previews.framing import Exchange, Parsed, request_header_block
from previews.gateway import Gateway, Route, Settled
from previews.relay_answers import BACKLOG, Answering
from previews.relay_repeat import Repeating
from previews.relay_upstream import HIGH_WATER, MAX_RAW_HEAD, MEMO_MAX, Again, Upstream
from sandbox.netns import NamespaceGone, OtherHost

log = logging.getLogger("berth.previews")

MAX_HEAD = 64 * 1024  # a request's line and headers, as llhttp hands them over
HEAD_TOO_LARGE = f"A request's line and headers may take {MAX_HEAD // 1024} KB at most."


class Client(Answering, Repeating, asyncio.Protocol):
    """A connection from a browser (or any client) to the gateway: its requests
    read and routed here, their answers written by `Answering`."""

    def __init__(self, gateway: Gateway) -> None:
        self.gw = gateway
        self.parser = httptools.HttpRequestParser(self)
        self.queue: deque[Exchange] = deque()
        self.parsing = Exchange()
        self.transport: Any = None
        self.peer = ""
        self.paused: set[str] = set()
        self.writing_paused = False
        self.gone = False
        self.close_after = False  # the answer being written ends the connection
        self.no_more = False  # no further request will be read: close once all are answered
        self.lingering = False  # answered and ended our side; discarding what still comes
        self.in_head = True  # reading a request's line and headers
        self.at_start = True  # llhttp is where a request starts (nothing of one read yet)
        self.begun = 0  # requests llhttp has begun on this connection
        # This connection's last request, when it came whole in one read with nothing
        # after it and no body: those bytes, and what llhttp made of them (`_replay`).
        self.memo: tuple[bytes, Parsed | None] = (b"", None)
        self.head: Parsed | None = None  # the last request's, as its head was read
        self.head_size = 0
        self.raw_head = 0
        self.last = 0.0
        self.timer: asyncio.TimerHandle | None = None
        self.out: list[bytes] | None = None  # one read's writes, sent at once (batch)
        # The last request head and answer head, by what made them: a client repeats
        # its headers on a connection, and the app its answer, so most are not rebuilt.
        self.sent: tuple[Any, bytes] = (None, b"")
        self.answered: tuple[Any, tuple[bytes, str, bool, bool]] = (None, (b"", "", False, False))
        # The last answer from an app that came whole in one read, as the client was
        # sent it: an app repeats its answer to a repeated request (Upstream._again).
        self.again: Again | None = None
        # What the last route into a sandbox rested on (Gateway.settled), for a repeat.
        self.settled: Settled | None = None
        self.repeated: tuple[Settled | None, bytes] = (None, b"")  # its head (_repeat)

    # -- connection --------------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.loop = asyncio.get_running_loop()
        peer = transport.get_extra_info("peername")
        self.peer = str(peer[0]) if peer else ""
        transport.set_write_buffer_limits(high=HIGH_WATER)
        self.last = self.loop.time()
        self.timer = self.loop.call_later(settings.PREVIEW_IDLE_CONNECTION_S, self._idle_check)

    def data_received(self, data: bytes) -> None:
        self.last = self.loop.time()
        if self.no_more or self.lingering:
            return
        memo = self.memo
        if self.at_start and memo[1] is not None and data == memo[0]:
            self._replay(memo[1])
            return
        fresh, begun = self.at_start, self.begun
        if self.in_head:
            # llhttp keeps a header it has not seen the end of: bound what it may keep.
            self.raw_head += len(data)
            if self.raw_head > MAX_RAW_HEAD:
                self._refuse(431, "headers_too_large", HEAD_TOO_LARGE)
                return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade as e:
            # The upgrade request is queued whole; what follows its head belongs to the
            # WebSocket, which opens when the request's turn comes (unless it was
            # refused already, at once: then the connection ends with that answer).
            self.parsing.tail = data[e.args[0] :]
            if not self.parsing.answered:
                self._pause("upgrade")
        except httptools.HttpParserCallbackError as e:
            if self.head_size > MAX_HEAD:
                self._refuse(431, "headers_too_large", HEAD_TOO_LARGE)
            else:  # a fault of the gateway's own: said once in its log, never hidden
                log.error("preview gateway: handling a request failed", exc_info=e.__context__ or e)
                self._refuse(
                    500, "gateway_error", "The preview gateway failed on this request; try again."
                )
        except httptools.HttpParserError as e:
            self._refuse(400, "bad_request", f"This is not HTTP/1.1 the gateway can read ({e}).")
        else:
            # One whole request, begun and ended in this read, with nothing after it.
            if (
                fresh
                and self.at_start
                and self.begun == begun + 1
                and self.head is not None
                and len(data) <= MEMO_MAX
            ):
                self.memo = (data, self.head)

    def _refuse(self, status: int, code: str, message: str) -> None:
        """Unreadable input: the requests read before it are answered in order, then
        the connection ends (with this answer, if none was pending)."""
        self.no_more = True
        self._pause("broken")
        if not self.queue:
            self.close_after = True
            self._answer(Exchange(), status, code, message, title="Bad request", queued=False)

    def eof_received(self) -> bool:
        """The client sent all it will (a half-close): answer what it asked, then close."""
        if not self.queue or self.lingering:
            return False
        self.no_more = True
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.gone = True
        if self.timer:
            self.timer.cancel()
        for ex in self.queue:
            if ex.upstream is not None and ex.upstream.ex is ex:
                ex.upstream.ex = None
                ex.upstream.close()
            self._uncount(ex)
        self.queue.clear()

    def pause_writing(self) -> None:
        self.writing_paused = True
        upstream = self._upstream()
        if upstream is not None:
            upstream.transport.pause_reading()

    def resume_writing(self) -> None:
        self.writing_paused = False
        upstream = self._upstream()
        if upstream is not None:
            upstream.transport.resume_reading()

    def _upstream(self) -> Upstream | None:
        return self.queue[0].upstream if self.queue else None

    def _pause(self, why: str) -> None:
        if not self.paused and not self.gone:
            self.transport.pause_reading()
        self.paused.add(why)

    def _resume(self, why: str) -> None:
        if why in self.paused:
            self.paused.discard(why)
            if not self.paused and not self.gone:
                self.transport.resume_reading()

    def _idle_check(self) -> None:
        """PREVIEW_IDLE_CONNECTION_S without a byte either way ends the connection (a
        request the app has not answered by then gets a 504 first). Aborted, not
        closed: a client that stopped reading would hold a close open for ever."""
        if self.gone:
            return
        idle = settings.PREVIEW_IDLE_CONNECTION_S
        left = self.last + idle - self.loop.time()
        if left > 0:
            self.timer = self.loop.call_later(left, self._idle_check)
            return
        if self.queue and not self.queue[0].answered and not self.writing_paused:
            self.close_after = True
            self._answer(
                self.queue[0],
                504,
                "app_timeout",
                f"The app sent nothing for {idle} s.",
                title="The app took too long",
            )
            self.timer = self.loop.call_later(min(idle, 10), self.transport.abort)
        else:
            self.transport.abort()

    # -- llhttp's callbacks for the request --------------------------------------------

    def on_message_begin(self) -> None:
        self.parsing = Exchange()
        self.in_head = True
        self.at_start = False
        self.begun += 1
        self.head_size = 0

    def on_url(self, url: bytes) -> None:
        self.parsing.target += url
        self._count(len(url))

    def _count(self, size: int) -> None:
        self.head_size += size
        if self.head_size > MAX_HEAD:
            raise ValueError("head too large")  # llhttp stops; data_received answers 431

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)
        ex = self.parsing
        name = name.lower()
        ex.headers.append((name, value))
        if name == b"host":
            ex.hosts += 1
            ex.host = value.decode("latin-1").lower()
        elif name == b"cookie":
            ex.cookie = ex.cookie + b"; " + value if ex.cookie else value
        elif name == b"content-length":
            ex.length = int(value)  # llhttp accepts digits only
        elif name == b"transfer-encoding":
            ex.chunked = True  # llhttp refuses any coding not ending in chunked
        elif name == b"expect":
            ex.expect = True
        elif name == b"origin" or name.startswith(b"sec-fetch-"):
            ex.fetch_meta = True

    def on_headers_complete(self) -> None:
        ex = self.parsing
        self.in_head = False
        self.raw_head = 0
        ex.method = self.parser.get_method()
        ex.version = self.parser.get_http_version()
        ex.keep_alive = self.parser.should_keep_alive()
        ex.upgrade = self.parser.should_upgrade()
        if ex.upgrade:
            # Only a WebSocket becomes a tunnel; any other upgrade (h2c) is a plain
            # request, the connection's last: llhttp reads nothing after an upgrade.
            ex.upgrade = any(
                k == b"upgrade" and v.strip().lower() == b"websocket" for k, v in ex.headers
            )
            ex.keep_alive = False
        if ex.hosts != 1:
            ex.host = ""  # none or several: the web process answers that
        # Before routing changes anything (an Expect answered).
        self.head = ex.parsed_from = ex.parsed()
        self._headed(ex)

    def _headed(self, ex: Exchange) -> None:
        """A request's head is read: it joins the queue, and goes on if it is first."""
        self.queue.append(ex)
        if len(self.queue) == 1:
            self._dispatch(ex)
        elif len(self.queue) > BACKLOG:
            self._pause("backlog")

    def on_body(self, body: bytes) -> None:
        ex = self.parsing
        ex.body_seen += len(body)
        if (
            ex.chunked
            and ex.body_seen > self.gw.max_body
            and ex.route is not None
            and ex.route.kind == "sandbox"
        ):
            self._too_large(ex)
            return
        if ex.upstream is not None and ex.route is not None and ex.route.kind == "sandbox":
            ex.upstream.write_body(body, ex.chunked)
        elif not ex.answered:  # kept while the web process decides (it never gets a body)
            ex.pending.append(body)
            ex.pending_size += len(body)
            if ex.pending_size > HIGH_WATER:
                self._pause("buffer")

    def on_message_complete(self) -> None:
        self.at_start = True
        self._ended(self.parsing)

    def _ended(self, ex: Exchange) -> None:
        ex.ended = True
        self.in_head = True
        if ex.upstream is not None and ex.route is not None and ex.route.kind == "sandbox":
            ex.upstream.end_body(ex.chunked)

    # -- routing a request -------------------------------------------------------------

    def _dispatch(self, ex: Exchange) -> None:
        settled = self.settled
        route = None
        if settled is not None and ex.parsed_from is settled[0]:
            route = self.gw.again(settled)  # a repeat: decided again from what it rested on
        if route is None:
            route = self.gw.decide(ex)
            self.settled = self.gw.settled(ex, route)
        if route is None:
            self._pause("lookup")
            self.loop.create_task(self._look_up(ex))
        else:
            self._go(ex, route)

    async def _look_up(self, ex: Exchange) -> None:
        try:
            route = await self.gw.look_up(ex)
        except Exception:
            log.exception("preview gateway: lookup failed; handing the request on")
            route = Route("app")
        self._resume("lookup")
        if not self.gone and not ex.answered:
            self._go(ex, route)

    def _go(self, ex: Exchange, route: Route) -> None:
        ex.route = route
        if ex.upgrade and (ex.length or ex.chunked):
            route = Route(
                "answer",
                status=400,
                code="bad_request",
                message="A WebSocket handshake has no body.",
            )
        if route.kind == "answer":
            self._answer(ex, route.status, route.code, route.message, route.title)
            return
        if ex.upgrade:
            # Never handed on as bytes: the web process decides, and watches its viewer.
            self.loop.create_task(tunnel.serve(self, ex))
            return
        if route.kind == "sandbox":
            assert route.target is not None
            self.gw.opened(route.target)
            ex.counted = True
            if ex.chunked and ex.body_seen > self.gw.max_body:
                self._too_large(ex)
                return
            if ex.expect:
                # The app is not told of it (previews.headers): the gateway, about to
                # read the body on, asks for it itself.
                ex.expect = False
                self.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        upstream = self.gw.take(route.key)
        if upstream is not None:
            self._send(ex, upstream)
        else:
            self.loop.create_task(self._connect(ex, route))

    async def _connect(self, ex: Exchange, route: Route) -> None:
        key = route.key
        try:
            upstream = await self.gw.open_upstream(route, lambda: Upstream(self.gw, key))
        except OtherHost:
            # Another host's gateway serves it (the edge that routes by host comes in
            # runner hosts, part 3): nothing here is stale, so nothing is forgotten.
            assert route.target is not None and route.target.ns is not None
            self._answer(
                ex,
                502,
                "preview_on_another_host",
                f"This preview runs on host {route.target.ns.host!r}; this gateway does not "
                "serve it. Open it through that host's gateway.",
                title="This preview runs on another host",
            )
            return
        except NamespaceGone:
            assert route.target is not None and route.target.ns is not None
            self.gw.forget_namespace(route.target.ns)
            # The gateway's view of a preview lags its state by up to
            # lookups.TARGET_TTL_S (a frame reloaded at the crash gets here): the page
            # looks again in a second, when the state, read afresh, says why it ended.
            self._answer(
                ex,
                503,
                "preview_stopped",
                "The preview's sandbox is gone; it is stopping.",
                title="This preview is stopping",
                refresh=True,
            )
            return
        except (OSError, TimeoutError):
            if route.kind == "sandbox":
                assert route.target is not None
                self._answer(
                    ex,
                    502,
                    "app_not_listening",
                    f"Nothing accepted a connection "
                    f"on port {route.target.port} inside the preview; the app may "
                    "be restarting or crashed.",
                    title="The app did not answer",
                )
            else:
                self._answer(
                    ex,
                    502,
                    "berth_unavailable",
                    "Berth's web process did not answer the gateway; try again shortly.",
                    title="Berth is busy",
                )
            return
        if self.gone or ex.answered:
            upstream.close()
            self._uncount(ex)
            return
        self._send(ex, upstream)

    def _send(self, ex: Exchange, upstream: Upstream) -> None:
        ex.upstream = upstream
        upstream.start(self, ex)
        if self.writing_paused:
            upstream.transport.pause_reading()
        elif not upstream.transport.is_reading():
            upstream.transport.resume_reading()
        upstream.transport.write(self._head(ex))
        if ex.route is not None and ex.route.kind == "app":
            return  # a question: the body waits for the verdict (`decided`)
        if ex.pending:
            for piece in ex.pending:
                upstream.write_body(piece, ex.chunked)
            ex.pending.clear()
            ex.pending_size = 0
            self._resume("buffer")
        if ex.ended and ex.chunked:
            upstream.end_body(ex.chunked)

    def _head(self, ex: Exchange) -> bytes:
        assert ex.route is not None
        key = (ex.route.kind, ex.chunked, ex.length, ex.method, ex.target, ex.headers)
        if key != self.sent[0]:
            block = request_header_block(ex, self.peer, self.gw)
            self.sent = (key, b"".join((ex.method, b" ", ex.target, b" HTTP/1.1\r\n", block)))
        return self.sent[1]


async def serve(bind: str, port: int, app: tuple[str, int], stop: asyncio.Event) -> None:
    """Serve until `stop`, then give open requests a few seconds to finish."""
    gateway = Gateway(app)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Client(gateway), bind, port, backlog=1024)
    log.info("preview gateway serving on %s:%s (the rest to %s:%s)", bind, port, *app)
    print(f"preview gateway serving on {bind}:{port}", flush=True)
    signals = loop.create_task(gateway.follow_signals(stop))
    await stop.wait()
    signals.cancel()
    server.close()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(server.wait_closed(), 5)
