"""What one connection to a sandbox's egress proxy asked for, what it may still use, and
the proxy's own HTTP answers (sandbox.egress.proxy serves them)."""

import asyncio
import ipaddress
import socket
import time
from dataclasses import dataclass, field
from http import HTTPStatus
from urllib.parse import urlsplit

import h11

from sandbox.egress import policy

# Hop-by-hop headers, per connection: never passed on (RFC 9110 7.6.1). Framing headers
# (Content-Length, Transfer-Encoding) are passed on: h11 frames each side from them.
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"te",
        b"proxy-authorization",
        b"proxy-authenticate",
        b"trailer",
        b"upgrade",
    }
)


@dataclass
class Budget:
    """What one run may still use, shared by its sandboxes (setup, then the command)."""

    max_bytes: int
    max_connections: int
    used_bytes: int = 0
    active: int = 0


@dataclass
class Gauge:
    """Connections open to the proxies of one scope: a sandbox, a team, the agent."""

    cap: int
    reason: str  # the denial's type when this cap is what refuses
    what: str  # the cap in words, for the message the sandbox's client reads
    open: int = 0


@dataclass
class Attempt:
    """One connection the sandbox asked for, and what became of it."""

    method: str
    host: str
    port: int
    address: str = ""
    allowed: bool = False
    reason: str = ""  # why it was refused or cut short; empty for a normal end
    bytes_up: int = 0
    bytes_down: int = 0
    started: float = field(default_factory=time.time)
    ended: float | None = None
    count: int = 1  # connections it stands for: more for a second's refusals shed at once


class Refused(Exception):
    def __init__(self, reason: str, status: int, message: str) -> None:
        super().__init__(message)
        self.reason, self.status, self.message = reason, status, message


class Capped(Exception):
    """A cap was reached in the middle of a connection: it ends there."""


def response(status: int, message: str, reason: str) -> bytes:
    """The proxy's own answer: the status, the typed reason in `x-berth-egress`, and a
    line saying what to do."""
    body = f"Berth egress proxy: {message}\n".encode()
    return (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
        "content-type: text/plain; charset=utf-8\r\n"
        f"content-length: {len(body)}\r\nx-berth-egress: {reason}\r\n"
        "connection: close\r\n\r\n"
    ).encode() + body


def content_length(answer: h11.Response, method: bytes) -> int | None:
    """The body length an answer declares, when it has a body framed that way."""
    if method == b"HEAD" or answer.status_code in (204, 304) or answer.status_code < 200:
        return None
    if any(k == b"transfer-encoding" for k, _ in answer.headers):
        return None  # chunked wins over a Content-Length (RFC 9112 6.3): h11 frames it
    values = [v for k, v in answer.headers if k == b"content-length"]
    return int(values[0]) if len(values) == 1 and values[0].isdigit() else None


def target(event: h11.Request) -> tuple[Attempt | None, bytes]:
    """The destination a request names, and the origin-form path to send there."""
    method = event.method.decode("ascii", "replace")
    try:
        target = event.target.decode("ascii")
        if event.method == b"CONNECT":
            host, _, port = target.rpartition(":")
            return Attempt(method, host.strip("[]").lower(), int(port)), b""
        url = urlsplit(target)
        if url.scheme != "http" or not url.hostname:
            return None, b""
        path = (url.path or "/") + (f"?{url.query}" if url.query else "")
        return Attempt(method, url.hostname.lower(), url.port or 80), path.encode("ascii")
    except (UnicodeDecodeError, ValueError):
        return None, b""


async def resolve(host: str, port: int) -> list[policy.Address]:
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return []
    return [ipaddress.ip_address(info[4][0]) for info in infos]
