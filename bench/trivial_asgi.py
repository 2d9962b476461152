"""The smallest ASGI app, served by daphne in bench/previews.py: the ceiling any proxy
inside daphne works under on this machine."""

from typing import Any


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/plain"), (b"content-length", b"3")],
        }
    )
    await send({"type": "http.response.body", "body": b"ok\n"})
