"""An agent's look at a preview (the MCP tool fetch_preview): one request through the
preview gateway, as a browser's would go, with a viewer cookie made for this one
request. The web process never connects into a sandbox itself.
"""

import asyncio
import contextlib
from dataclasses import dataclass, field

import httptools
from django.conf import settings

from core.errors import Conflict
from previews.gate import COOKIE_LAX

# The gateway's own answers (pages.answer) say which they are; the codes that mean
# the app did not answer are told as this tool always told them.
UNREACHABLE = {"app_not_listening", "preview_stopped"}


@dataclass
class Fetched:
    status: int = 0
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytearray = field(default_factory=bytearray)
    truncated: bool = False
    done: bool = False


class _Reader:
    def __init__(self, cap: int) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.got = Fetched()
        self.cap = cap
        self.interim = False

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self.interim:
            self.got.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        self.interim = status < 200
        if not self.interim:
            self.got.status = status

    def on_body(self, body: bytes) -> None:
        self.got.body += body
        if len(self.got.body) > self.cap:
            self.got.truncated = True

    def on_message_complete(self) -> None:
        if self.interim:
            self.interim = False
            self.got.headers = []
        else:
            self.got.done = True


async def fetch(
    host: str, cookie: str, method: str, path: str, body: bytes, cap: int, timeout: float = 30
) -> Fetched:
    """`method path` on `host` through the gateway: the app's answer (up to `cap`
    bytes of body), or a Conflict saying why there is none."""
    address = settings.PREVIEW_GATEWAY_ADDRESS
    gateway, _, port = address.rpartition(":")
    if not gateway or not port.isdigit():
        raise Conflict(
            "This Berth has no preview gateway address (PREVIEW_PORT, "
            "PREVIEW_GATEWAY_ADDRESS); open the preview in a browser instead.",
            code="preview_unreachable",
        )
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(gateway, int(port)), 10)
    except (OSError, TimeoutError):
        raise Conflict(
            "The preview gateway did not answer; try again shortly.",
            code="preview_unreachable",
        ) from None
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: berth-mcp-fetch\r\n"
        f"Cookie: {COOKIE_LAX}={cookie}\r\nConnection: close\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    answer = _Reader(cap)
    try:
        writer.write(head.encode("latin-1") + body)
        async with asyncio.timeout(timeout):
            while not answer.got.done and not answer.got.truncated:
                data = await reader.read(65536)
                if not data:
                    break
                answer.parser.feed_data(data)
    except (OSError, TimeoutError, httptools.HttpParserError) as e:
        raise Conflict(
            f"The app did not answer the request properly ({type(e).__name__}); "
            "its log (get_preview) may say why.",
            code="bad_upstream",
        ) from None
    finally:
        with contextlib.suppress(Exception):
            writer.close()
    got = answer.got
    if not got.status or not (got.done or got.truncated):
        raise Conflict(
            "The app did not answer the request properly; its log (get_preview) may say why.",
            code="bad_upstream",
        )
    own = dict(got.headers).get(b"x-berth-error", b"").decode("latin-1")
    if own in UNREACHABLE:
        raise Conflict(
            "Nothing answers on the preview's port now; get_preview says why.",
            code="preview_unreachable",
        )
    if own:
        raise Conflict(
            f"The preview gateway answered {got.status} ({own}) instead of the app; "
            "get_preview says why.",
            {"status": got.status},
            code="bad_upstream",
        )
    return got
