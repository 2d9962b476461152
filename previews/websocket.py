"""WebSocket upgrades through the preview proxy (a dev server's hot reload, an app's
live updates), spoken to the app with the `websockets` library over a socket made in
the sandbox's namespace.

The handshake forwards the client's path, query, subprotocols, Origin and cookies
(minus Berth's), never its Authorization; messages are relayed both ways until either
side closes, one passes PREVIEW_MAX_WS_MESSAGE_BYTES, the pair is silent for
PREVIEW_IDLE_CONNECTION_S, or the viewer's access ends (previews.tunnel_access).
"""

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from django.conf import settings
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.typing import Origin

from previews import gate
from sandbox import netns

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
TOO_BIG = 1009
Watch = Callable[[], Coroutine[Any, Any, int]]  # returns the close code once access is gone
GOING_AWAY = 1001


async def proxy_websocket(
    scope: dict[str, Any], receive: Any, send: Any, t: gate.Target, watch: Watch | None = None
) -> None:
    """Relay until either side closes, or `watch` returns (the viewer's access is gone:
    the browser's side is closed with the code it returns)."""
    message = await receive()
    if message["type"] != "websocket.connect":
        return
    if not t.ready or t.ns is None:
        await send({"type": "websocket.close", "code": 4503})
        return
    headers = dict(scope["headers"])
    host = headers.get(b"host", b"").decode("latin-1")
    extra = [
        (k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"] if k not in SKIP
    ]
    berth = gate.berth_cookie_names()
    cookies = [
        part
        for k, v in scope["headers"]
        if k == b"cookie"
        for part in v.decode("latin-1").split(";")
        if part.strip() and part.split("=", 1)[0].strip() not in berth
    ]
    if cookies:
        extra.append(("Cookie", ";".join(cookies).strip()))
    extra += [
        ("X-Forwarded-For", str((scope.get("client") or ("",))[0])),
        ("X-Forwarded-Proto", "ws" if scope.get("scheme", "ws") == "ws" else "wss"),
        ("X-Forwarded-Host", host),
    ]
    origin = headers.get(b"origin")
    try:
        sock = await netns.connect(t.ns, t.port)
        upstream = await connect(
            f"ws://{host}{gate.request_target(scope).decode('latin-1')}",
            sock=sock,
            proxy=None,
            additional_headers=extra,
            subprotocols=scope.get("subprotocols") or None,
            origin=Origin(origin.decode("latin-1")) if origin else None,
            user_agent_header=headers.get(b"user-agent", b"").decode("latin-1") or None,
            max_size=settings.PREVIEW_MAX_WS_MESSAGE_BYTES,
            compression=None,
            ping_interval=None,
            open_timeout=10,
        )
    except (OSError, TimeoutError, InvalidHandshake, netns.NamespaceGone) as e:
        log.info("preview %s: WebSocket to the app failed: %s", t.public_id, e)
        await send({"type": "websocket.close", "code": 4502})
        return
    await send({"type": "websocket.accept", "subprotocol": upstream.subprotocol})
    await _relay(receive, send, upstream, watch)


async def _relay(
    receive: Any, send: Any, upstream: ClientConnection, watch: Watch | None = None
) -> None:
    activity = asyncio.Event()
    limit = settings.PREVIEW_MAX_WS_MESSAGE_BYTES

    async def client_to_app() -> None:
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                await upstream.close()
                return
            activity.set()
            data = message.get("bytes") if message.get("bytes") is not None else message.get("text")
            if data is None:
                continue
            if len(data) > limit:
                await upstream.close()
                await send({"type": "websocket.close", "code": TOO_BIG})
                return
            await upstream.send(data)

    async def app_to_client() -> None:
        try:
            async for data in upstream:
                activity.set()
                key = "text" if isinstance(data, str) else "bytes"
                await send({"type": "websocket.send", key: data})
        except ConnectionClosed:
            pass
        code = upstream.close_code or 1000
        # 1005 and 1006 say "no code" and "abnormal"; neither may be sent on the wire.
        await send(
            {
                "type": "websocket.close",
                "code": 1000 if code in (1005, 1006) or code >= 5000 else code,
            }
        )

    async def idle() -> None:
        while True:
            activity.clear()
            try:
                await asyncio.wait_for(activity.wait(), settings.PREVIEW_IDLE_CONNECTION_S)
            except TimeoutError:
                await upstream.close()
                await send({"type": "websocket.close", "code": GOING_AWAY})
                return

    tasks: list[asyncio.Task[Any]] = [
        asyncio.create_task(c()) for c in (client_to_app, app_to_client, idle)
    ]
    guard = asyncio.create_task(watch()) if watch is not None else None
    if guard is not None:
        tasks.append(guard)
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if (
            guard is not None
            and guard.done()
            and not guard.cancelled()
            and guard.exception() is None
        ):
            # Access gone: nothing more is relayed (the other tasks are ended), and the
            # browser hears it before the app's close handshake is waited for.
            await send({"type": "websocket.close", "code": guard.result()})
        with contextlib.suppress(Exception):
            await upstream.close()
