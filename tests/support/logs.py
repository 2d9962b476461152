"""A run's log written as the runner agent writes it, and its WebSocket opened on the real
ASGI app."""

from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from config.asgi import application
from logs import logstore
from logs.logstore import LogWriter
from runs.models import Run


def write(run: Run, lines: list[str], signal: bool = False) -> int:
    with LogWriter(run.public_id) as w:
        for line in lines:
            count = w.append("stdout", f"{line}\n".encode(), None)
    if signal:
        logstore.signal(run.public_id, count)
    return count


async def connect(
    run: Run, after: int = 0, secret: str | None = None, cookie: str | None = None
) -> WebsocketCommunicator:
    return await open_socket(f"/ws/runs/{run.public_id}/logs?after={after}", secret, cookie)


async def open_socket(
    path: str, secret: str | None = None, cookie: str | None = None
) -> WebsocketCommunicator:
    """A WebSocket to `path` on Berth's own host, as a token's bearer or a session."""
    headers = [(b"origin", b"http://localhost"), (b"host", b"localhost")]
    if secret:
        headers.append((b"authorization", f"Bearer {secret}".encode()))
    if cookie:
        headers.append((b"cookie", cookie.encode()))
    ws = WebsocketCommunicator(application, path, headers=headers)
    connected, _ = await ws.connect(timeout=5)
    assert connected
    return ws


async def closed_with(ws: WebsocketCommunicator) -> int | None:
    message = await ws.receive_output(timeout=5)
    assert message["type"] == "websocket.close", message
    return message.get("code")


def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
