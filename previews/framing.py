"""How the preview gateway (previews.relay) frames what it forwards: the state of one
request, the header block it sends on, and the head of the answer it gives back.

Framing is redone on each hop, never copied: a body with a Content-Length keeps it;
one without is re-chunked (or, to an HTTP/1.0 client, ends with the connection), so a
header the app or client sent cannot make the two sides disagree on where a message
ends.
"""

from typing import TYPE_CHECKING, Any

from previews import gate
from previews.headers import (
    HOP_BY_HOP,
    connection_named,
    forwarded_headers,
    response_headers,
    with_frame_ancestors,
)

if TYPE_CHECKING:
    from previews.gateway import Route
    from previews.relay_upstream import Upstream

CRLF = b"\r\n"
FRAMING = {b"content-length", b"transfer-encoding"}
ASKED_NOT = {b"expect", b"sec-websocket-key", b"sec-websocket-extensions"}

# What llhttp made of a request that had no body and kept its connection (Exchange's
# `parsed`): target, headers, host, hosts, cookie, fetch_meta, method, version.
Parsed = tuple[bytes, list[tuple[bytes, bytes]], str, int, bytes, bool, bytes, str]


class Exchange:
    """One request from the client and the state of its answer."""

    __slots__ = (
        "answered",
        "body_seen",
        "chunked",
        "cookie",
        "counted",
        "ended",
        "expect",
        "fetch_meta",
        "headers",
        "host",
        "hosts",
        "keep_alive",
        "length",
        "method",
        "parsed_from",
        "pending",
        "pending_size",
        "retried",
        "route",
        "tail",
        "target",
        "upgrade",
        "upstream",
        "version",
    )

    def __init__(self, parsed: Parsed | None = None) -> None:
        self.headers: list[tuple[bytes, bytes]]
        if parsed is None:
            self.target = b""
            self.headers = []
            self.host = ""
            self.hosts = 0
            self.cookie = b""
            self.fetch_meta = False  # an Origin or Sec-Fetch-* header came (refusal)
            self.method = b""
            self.version = "1.1"
        else:  # a request as llhttp parsed it before (`parsed`)
            (
                self.target,
                self.headers,
                self.host,
                self.hosts,
                self.cookie,
                self.fetch_meta,
                self.method,
                self.version,
            ) = parsed
        self.length = 0
        self.chunked = self.expect = self.upgrade = False
        self.keep_alive = True
        self.ended = self.answered = self.counted = self.retried = False
        self.pending: list[bytes] = []
        self.pending_size = self.body_seen = 0
        self.route: Route | None = None
        self.upstream: Upstream | None = None
        self.tail = b""
        # The Parsed this request is (`parsed`), when it is one: the same object for
        # every repeat of it on a connection (previews.relay_repeat).
        self.parsed_from = parsed

    def parsed(self) -> Parsed | None:
        """What llhttp made of this request, when that is all there is to it: no body,
        no Expect, no upgrade, and the connection kept (a request a client repeats); taken
        as its head is read, before routing changes anything."""
        if (
            self.length
            or self.chunked
            or self.expect
            or self.upgrade
            or not self.keep_alive
            or self.tail
        ):
            return None
        return (
            self.target,
            self.headers,
            self.host,
            self.hosts,
            self.cookie,
            self.fetch_meta,
            self.method,
            self.version,
        )


def chunk(data: bytes) -> bytes:
    """`data` as one chunk of a chunked body."""
    return b"%x\r\n" % len(data) + data + CRLF


def header_lines(headers: list[tuple[bytes, bytes]]) -> bytes:
    """Headers as sent on the wire, with the blank line that ends them."""
    return b"".join([*[k + b": " + v + CRLF for k, v in headers], CRLF])


def question_headers(ex: Exchange, peer: str, key: bytes) -> list[tuple[bytes, bytes]]:
    """The headers of the question the gateway asks the web process about `ex`
    (previews.decide): the client's, without a body or hop-by-hop ones, plus the
    gateway's key, the client, and whether it is a WebSocket handshake."""
    drop = FRAMING | ASKED_NOT | set(gate.GATEWAY_HEADERS) | HOP_BY_HOP
    headers = [(k, v) for k, v in ex.headers if k not in drop | connection_named(ex.headers)]
    headers += [(b"x-berth-gateway", key), (b"x-berth-client", peer.encode())]
    if ex.upgrade:
        headers.append((b"x-berth-upgrade", b"websocket"))
    return headers


def request_header_block(ex: Exchange, peer: str, gw: Any) -> bytes:
    """The headers `ex` goes on with: to a sandbox, as the header rules make them; to
    the web process, as a question (`question_headers`: the body stays here)."""
    assert ex.route is not None
    if ex.route.kind != "sandbox":
        return header_lines(question_headers(ex, peer, gw.key))
    headers = forwarded_headers(ex.headers, peer, gw.scheme)
    if ex.chunked:
        headers.append((b"transfer-encoding", b"chunked"))
    elif ex.length or ex.method in (b"POST", b"PUT", b"PATCH"):
        headers.append((b"content-length", b"%d" % ex.length))
    return header_lines(headers)


def answer_head(
    ex: Exchange,
    status: int,
    reason: bytes,
    given: list[tuple[bytes, bytes]],
    close_after: bool,
    frames: bytes | None = None,
) -> tuple[bytes, str, bool, bool]:
    """The head for the client, how its body is framed ("raw", "chunked" or "close"),
    whether the app's answer ends with its connection, and whether the client's
    connection ends after it (`close_after`: it already does). `frames`: Berth's
    origins, when only they may frame the answer (a non-public target)."""
    assert ex.route is not None
    if ex.route.kind == "sandbox":
        headers = response_headers(given, ex.host.split(":")[0])
        if frames is not None:
            headers = with_frame_ancestors(headers, frames)
    else:  # Berth's own answer (it sets the preview cookie): framing redone only
        named = connection_named(given)
        headers = [(k, v) for k, v in given if k not in HOP_BY_HOP and k not in named]
    declared = any(k == b"content-length" for k, _ in headers)
    no_body = ex.method == b"HEAD" or status in (204, 304)
    # As llhttp reads it: without a length or a final chunked coding, the body runs to
    # the end of the connection.
    codings = [v for k, v in given if k == b"transfer-encoding"]
    chunked = bool(codings) and codings[-1].rsplit(b",", 1)[-1].strip().lower() == b"chunked"
    eof_ends = not declared and not no_body and not chunked
    if declared or no_body:
        mode = "raw"
    elif ex.version == "1.1":
        mode = "chunked"
        headers.append((b"transfer-encoding", b"chunked"))
    else:
        mode = "close"  # an HTTP/1.0 client: the body ends with the connection
    if not ex.keep_alive or mode == "close":
        close_after = True
    if close_after:
        headers.append((b"connection", b"close"))
    elif ex.version == "1.0":
        headers.append((b"connection", b"keep-alive"))
    return (
        b"HTTP/1.1 %d " % status + reason + CRLF + header_lines(headers),
        mode,
        eof_ends,
        close_after,
    )


def own_answer(
    status: int, headers: list[tuple[bytes, bytes]], body: bytes, frames: bytes | None, close: bool
) -> bytes:
    """The gateway's own answer (an error page or object) as bytes on the wire: the
    frame-ancestors rule of a non-public target, its length, and a close if it ends
    the connection."""
    if frames is not None:
        headers = with_frame_ancestors(headers, frames)
    headers = [*headers, (b"content-length", b"%d" % len(body))]
    if close:
        headers.append((b"connection", b"close"))
    return b"HTTP/1.1 %d \r\n" % status + header_lines(headers) + body
