"""WebSockets through the preview gateway (a dev server's hot reload, an app's live
updates): the gateway asks the web process (previews.decide), and on its verdict
speaks the WebSocket to both sides itself with the `websockets` library, to the app
over a socket made in the sandbox's namespace.

The handshake forwards the client's path, query, subprotocols, Origin and cookies
(minus Berth's), never its Authorization; messages are relayed both ways until either
side closes, one passes PREVIEW_MAX_WS_MESSAGE_BYTES (1009), the pair is silent for
PREVIEW_IDLE_CONNECTION_S (1001), or the viewer's access ends: the web process's
answer to the handshake's question stays open while it holds and ends with the close
code to send (previews.tunnel_access); a lost answer is a check that could not be
made (1011).
"""

import asyncio
import contextlib
import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

import httptools
from django.conf import settings
from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.connection import Connection
from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.http11 import Request
from websockets.server import ServerProtocol
from websockets.typing import Origin, Subprotocol

from previews import gate
from previews.framing import Exchange, header_lines, own_answer, question_headers
from sandbox import netns

if TYPE_CHECKING:
    from previews.relay import Client

log = logging.getLogger("berth.previews")

SKIP = {
    b"host",
    b"connection",
    b"upgrade",
    b"authorization",
    b"origin",
    b"cookie",
    b"sec-websocket-key",
    b"sec-websocket-version",
    b"sec-websocket-extensions",
    b"sec-websocket-protocol",
    b"x-forwarded-for",
    b"x-forwarded-proto",
    b"x-forwarded-host",
    b"forwarded",
    b"user-agent",
    *gate.GATEWAY_HEADERS,
}
GOING_AWAY = 1001
CHECK_FAILED = 1011  # the web process stopped watching: the tunnel may not go on unchecked
MAX_ANSWER = 1024 * 1024  # a refusal from the web process, sent on whole
BUSY = "This preview has too many open connections; try again shortly."


class Reply:
    """The web process's answer to the gateway's question, as llhttp reads it."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.body = bytearray()
        self.headed = self.done = False

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.headed = True

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.done = True

    async def read(self, reader: asyncio.StreamReader, until: str) -> None:
        """Read until `until` ("headed" or "done"), or the end of the connection."""
        while not getattr(self, until) and len(self.body) <= MAX_ANSWER:
            data = await reader.read(65536)
            if not data:
                return
            self.parser.feed_data(data)


async def serve(client: "Client", ex: Exchange) -> None:
    """Ask, then either send the web process's answer on, or open the WebSocket."""
    gw = client.gw
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(*gw.app), 10)
    except (OSError, TimeoutError):
        client._answer(
            ex,
            502,
            "berth_unavailable",
            "Berth's web process did not answer the gateway; try again shortly.",
            title="Berth is busy",
        )
        return
    try:
        question = b"GET " + ex.target + b" HTTP/1.1\r\n"
        since = gw.lookups.generation  # the verdict is cached only if no drop comes first
        writer.write(question + header_lines(question_headers(ex, client.peer, gw.key)))
        reply = Reply()
        with contextlib.suppress(OSError, TimeoutError, httptools.HttpParserError):
            await asyncio.wait_for(reply.read(reader, "headed"), 30)
        verdict = next((v for k, v in reply.headers if k == gate.VERDICT), None)
        if client.gone:
            return
        if reply.status != 200 or verdict is None:
            if reply.headed:
                with contextlib.suppress(OSError, TimeoutError, httptools.HttpParserError):
                    await asyncio.wait_for(reply.read(reader, "done"), 10)
            if reply.done:
                client.relay_answer(ex, reply.status, reply.headers, bytes(reply.body))
            else:
                client._answer(
                    ex,
                    502,
                    "app_broke_request",
                    "Berth's web process closed the connection without answering.",
                    title="The app broke this request",
                )
            return
        t = gw.verdict(ex, verdict, since)
        if client.gone:
            return
        if gw.lookups.open.get(t.public_id, 0) >= gw.max_connections:
            client._answer(ex, 503, "preview_busy", BUSY)
            return
        gw.opened(t)
        try:
            await _open(client, ex, t, _watch(reader, reply))
        finally:
            gw.closed(t)
    finally:
        writer.close()


async def _watch(reader: asyncio.StreamReader, reply: Reply) -> int:
    """The close code the web process ends its answer with once the viewer's access
    is gone (never returns while it holds)."""
    with contextlib.suppress(OSError, httptools.HttpParserError):
        await reply.read(reader, "done")
    code = bytes(reply.body).strip()
    return int(code) if reply.done and code.isdigit() else CHECK_FAILED


async def _open(client: "Client", ex: Exchange, t: gate.Target, watch: Awaitable[int]) -> None:
    """The app's side first (its subprotocol is the one the browser gets), then the
    browser's; then messages both ways."""
    assert t.ns is not None
    raw = dict(ex.headers)
    host = raw.get(b"host", b"").decode("latin-1")
    extra = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in ex.headers if k not in SKIP]
    berth = gate.berth_cookie_names()
    cookies = [
        part
        for k, v in ex.headers
        if k == b"cookie"
        for part in v.decode("latin-1").split(";")
        if part.strip() and part.split("=", 1)[0].strip() not in berth
    ]
    if cookies:
        extra.append(("Cookie", ";".join(cookies).strip()))
    extra += [
        ("X-Forwarded-For", client.peer),
        ("X-Forwarded-Proto", "wss" if client.gw.scheme == "https" else "ws"),
        ("X-Forwarded-Host", host),
    ]
    offered = [
        Subprotocol(p.strip())
        for k, v in ex.headers
        if k == b"sec-websocket-protocol"
        for p in v.decode("latin-1").split(",")
        if p.strip()
    ]
    origin = raw.get(b"origin")
    limit = settings.PREVIEW_MAX_WS_MESSAGE_BYTES
    try:
        sock = await netns.connect(t.ns, t.port)
        app = await connect(
            f"ws://{host}{ex.target.decode('latin-1')}",
            sock=sock,
            proxy=None,
            additional_headers=extra,
            subprotocols=offered or None,
            origin=Origin(origin.decode("latin-1")) if origin else None,
            user_agent_header=raw.get(b"user-agent", b"").decode("latin-1") or None,
            max_size=limit,
            compression=None,
            ping_interval=None,
            open_timeout=10,
        )
    except (OSError, TimeoutError, InvalidHandshake, netns.NamespaceGone) as e:
        log.info("preview %s: WebSocket to the app failed: %s", t.public_id, e)
        # As a handshake refused before it was accepted always was: 403.
        client._answer(ex, 403, "websocket_refused", f"The app did not take the WebSocket ({e}).")
        return
    try:
        browser = client.hand_over(ex, lambda _p, _offered: app.subprotocol, limit)
        if browser is not None:
            await _relay(browser, app, watch)
    finally:
        with contextlib.suppress(Exception):
            await app.close()


def accept(ex: Exchange, subprotocol: Any, limit: int) -> tuple[Connection | None, bytes]:
    """The browser's side: its handshake answered (101, or why not) as bytes to send,
    and the connection that speaks the WebSocket once it is accepted."""
    protocol = ServerProtocol(select_subprotocol=subprotocol, max_size=limit)
    # Its parser reads the handshake before any frame: given the request as it came.
    protocol.receive_data(b"GET " + ex.target + b" HTTP/1.1\r\n" + header_lines(ex.headers))
    request = next(iter(protocol.events_received()), None)
    if not isinstance(request, Request):
        return None, own_answer(400, [], b"", None, True)
    response = protocol.accept(request)
    protocol.send_response(response)
    sent = b"".join(protocol.data_to_send())
    if response.status_code != 101:
        return None, sent
    return Connection(protocol, ping_interval=None), sent


async def _relay(browser: Connection, app: ClientConnection, watch: Awaitable[int]) -> None:
    activity = asyncio.Event()

    async def browser_to_app() -> None:
        with contextlib.suppress(ConnectionClosed):
            async for data in browser:
                activity.set()
                await app.send(data)
        await app.close()  # past PREVIEW_MAX_WS_MESSAGE_BYTES, the browser got a 1009

    async def app_to_browser() -> None:
        with contextlib.suppress(ConnectionClosed):
            async for data in app:
                activity.set()
                await browser.send(data)
        code = app.close_code or 1000
        # 1005 and 1006 say "no code" and "abnormal"; neither may be sent on the wire.
        await _close(browser, 1000 if code in (1005, 1006) or code >= 5000 else code)

    async def idle() -> None:
        while True:
            activity.clear()
            try:
                await asyncio.wait_for(activity.wait(), settings.PREVIEW_IDLE_CONNECTION_S)
            except TimeoutError:
                await app.close()
                await _close(browser, GOING_AWAY)
                return

    tasks: list[asyncio.Future[Any]] = [
        asyncio.ensure_future(c()) for c in (browser_to_app, app_to_browser, idle)
    ]
    guard = asyncio.ensure_future(watch)
    try:
        await asyncio.wait([*tasks, guard], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in [*tasks, guard]:
            task.cancel()
        await asyncio.gather(*tasks, guard, return_exceptions=True)
        if guard.done() and not guard.cancelled() and guard.exception() is None:
            # Access gone: nothing more is relayed (the other tasks are ended), and the
            # browser hears it before the app's close handshake is waited for.
            log.info("a preview tunnel's viewer lost access (%d): closing it", guard.result())
            await _close(browser, guard.result())
        with contextlib.suppress(Exception):
            await app.close()
        await _close(browser, 1000)


async def _close(browser: Connection, code: int) -> None:
    with contextlib.suppress(Exception):
        await browser.close(code)
