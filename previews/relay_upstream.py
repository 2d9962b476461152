"""The preview gateway's side toward an app or the web process (previews.relay has
the client's side): one request at a time over a connection, the answer parsed by
llhttp and handed to the client's side as it comes; kept for the next request
(Gateway.keep) only when nothing of the last one is left in either direction.
"""

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import httptools

from previews.framing import chunk
from previews.gateway import Gateway, Route

if TYPE_CHECKING:
    from previews.framing import Exchange, Parsed
    from previews.relay import Client

log = logging.getLogger("berth.previews")

HIGH_WATER = 256 * 1024
MAX_RAW_HEAD = 1024 * 1024  # bytes read while an answer's head is incomplete
MEMO_MAX = 16 * 1024  # the longest read kept to be recognised again (Upstream.memo)
# What llhttp made of an answer (Upstream.memo): status, reason, headers, whether it
# keeps the connection, and the body's pieces.
Answer = tuple[int, bytes, list[tuple[bytes, bytes]], bool, tuple[bytes, ...]]
# An app's answer as a client's connection last had it (Upstream._again): its bytes, the
# route and request it answered, and the bytes the client was sent.
Again = tuple[bytes, Route, "Parsed", bytes]


class Upstream(asyncio.Protocol):
    """A connection from the gateway to a sandbox's app or to the web process: one
    request at a time, then kept for the next (Gateway.keep) when both sides allow."""

    def __init__(self, gateway: Gateway, key: Any) -> None:
        self.gw = gateway
        self.key = key
        self.transport: Any = None
        self.parser = httptools.HttpResponseParser(self)
        self.client: Client | None = None
        self.ex: Exchange | None = None
        self.verdict: bytes | None = None  # the web process's "serve it", for `ex`
        self.since = 0  # the lookups' generation when `ex` was sent (Lookups.drop)
        self.open = True
        self.used = self.got = self.skip = self.eof_ends = self.done = False
        self.keep = True
        self.mode = "raw"
        self.reason = b""
        self.status = 0
        self.keep_alive = True
        self.headers: list[tuple[bytes, bytes]] = []
        self.headed = False  # the answer's head has been read
        self.raw_head = 0
        self.at_start = True  # llhttp is where an answer starts
        self.begun = 0  # answers llhttp has begun on this connection
        # What llhttp made of the last answer that came whole in one read from where an
        # answer starts, with nothing after it, and those bytes (`_replay`).
        self.memo: tuple[bytes, Answer | None] = (b"", None)
        self.seen: list[bytes] = []  # the answer's body as llhttp hands it over

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        transport.set_write_buffer_limits(high=HIGH_WATER)

    def usable(self) -> bool:
        return self.open and not self.transport.is_closing()

    def reusable(self, sent: bool) -> bool:
        """Fit for the next request: the answer ended cleanly, the request was all
        `sent` (and nothing of it is still buffered), and the app keeps the connection."""
        transport = self.transport
        if not (
            self.keep
            and sent
            and self.mode != "close"
            and not self.eof_ends
            and self.open  # usable()
            and not transport.is_closing()
            and transport.get_write_buffer_size() == 0
        ):
            return False
        if not transport.is_reading():
            transport.resume_reading()  # paused for the last client's sake
        return True

    def start(self, client: "Client", ex: "Exchange") -> None:
        self.client, self.ex = client, ex
        self.verdict = None
        self.since = self.gw.lookups.generation
        self.got = self.skip = self.eof_ends = self.done = self.headed = False
        self.keep = True
        self.mode = "raw"
        self.raw_head = 0

    def write_body(self, data: bytes, chunked: bool) -> None:
        self.transport.write(chunk(data) if chunked else data)

    def end_body(self, chunked: bool) -> None:
        if chunked:
            self.transport.write(b"0\r\n\r\n")

    def close(self) -> None:
        self.open = False
        if self.transport is not None:
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        ex, client = self.ex, self.client
        if ex is None or client is None:
            self.close()  # bytes nobody asked for: this connection is not to be trusted
            return
        self.got = True
        client.last = client.loop.time()
        again = client.again
        if (
            again is not None
            and self.at_start
            and data == again[0]
            and ex.route is again[1]
            and ex.parsed_from is again[2]
            and not client.close_after
        ):
            self._again(client, again[3])
            return
        if not self.headed:
            self.raw_head += len(data)
            if self.raw_head > MAX_RAW_HEAD:
                self._broken(client, "its answer's headers are too large")
                return
        out = client.batch()
        memo = self.memo
        whole = self.at_start and len(data) <= MEMO_MAX  # from where an answer starts
        if self.at_start and memo[1] is not None and data == memo[0]:
            try:
                self._replay(memo[1])
            except Exception as e:  # as llhttp reports a callback's fault
                client.flush()
                self._broken(client, str(e))
                return
        else:
            begun = self.begun
            self.seen = []  # this read's pieces only: an answer to keep comes in one read
            try:
                self.parser.feed_data(data)
            except httptools.HttpParserError as e:
                client.flush()
                self._broken(client, str(e))
                return
            whole = whole and self.at_start and self.begun == begun + 1 and not self.skip
            if whole and self.keep:
                self.memo = (
                    data,
                    (self.status, self.reason, self.headers, self.keep_alive, tuple(self.seen)),
                )
        client.flush()
        if self.done:
            # Only now, with the whole read parsed: bytes after the answer mean the
            # connection is not to be reused (on_message_begin said so).
            self.done = False
            route, parsed = ex.route, ex.parsed_from
            if whole and out and route and parsed and self._repeatable(client, route, ex):
                client.again = (data, route, parsed, b"".join(out))
            client.respond_end(self)

    def _repeatable(self, client: "Client", route: Route, ex: "Exchange") -> bool:
        """Whether the answer just written, read whole from where an answer starts, is
        what the same bytes would make again for a repeat of the same request on this
        client's connection (`_again`): an app's answer (never a verdict) whose body has
        its length, to a request that has none, the connections both kept."""
        return (
            self.keep
            and self.mode == "raw"
            and not self.eof_ends
            and self.verdict is None
            and ex.ended
            and route.kind == "sandbox"
            and not client.close_after
            and not client.gone
        )

    def _again(self, client: "Client", out: bytes) -> None:
        """An answer whose bytes are those the client's connection last had from an app,
        whole from where an answer starts, to the same request (its Parsed, the same
        route): llhttp would call back with the same again, and the client's side make
        the same head and body of it (previews.framing.answer_head depends on nothing
        else), so those bytes are written as they were and the exchange ends, as
        `data_received` would have ended it. The header rules ran on them once."""
        self.begun += 1
        self.headed = True
        self.mode, self.eof_ends = "raw", False
        assert client.out is None and self.ex is not None
        if not client.gone:
            client.transport.write(out)
        self.ex.answered = True
        client.respond_end(self)

    def _replay(self, answer: "Answer") -> None:
        """An answer whose bytes are those of the last one this connection parsed whole
        from where an answer starts, as this one is: llhttp, a state machine, would call
        back with the same again, so what it called back with then is called again
        (the head, the body's pieces, the end), as the callbacks below would."""
        status, reason, headers, keep_alive, body = answer
        self.on_message_begin()
        self.reason = reason
        self.headers = headers
        self._headed(status, keep_alive)
        for piece in body:
            self.on_body(piece)
        self.on_message_complete()

    def _broken(self, client: "Client", why: str) -> None:
        self.keep = False
        self.close()
        if self.ex is not None:
            log.info("preview gateway: the app broke the protocol: %s", why)
            client.upstream_lost(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.open = False
        self.gw.forget(self.key, self)
        if self.client is not None and self.ex is not None:
            self.client.upstream_lost(self)

    def pause_writing(self) -> None:
        if self.client is not None:
            self.client._pause("upstream")

    def resume_writing(self) -> None:
        if self.client is not None:
            self.client._resume("upstream")

    # -- llhttp's callbacks for the answer ---------------------------------------------

    def on_message_begin(self) -> None:
        if self.done:
            self.keep = False  # a second answer to one request
        self.at_start = False
        self.begun += 1
        self.headers = []
        self.reason = b""
        self.seen = []

    def on_status(self, reason: bytes) -> None:
        self.reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self._headed(self.parser.get_status_code(), self.parser.should_keep_alive())

    def _headed(self, status: int, keep_alive: bool) -> None:
        self.status, self.keep_alive = status, keep_alive
        if status < 200:
            # Interim answers (103 Early Hints) are dropped: the final answer follows.
            # Neither the app nor the web process is sent an Expect (the gateway
            # answers it, previews.relay), so no 100 Continue of theirs is awaited.
            self.skip = True
            return
        self.headed = True
        self.keep = self.keep and keep_alive
        if self.client is not None and not self.done:
            self.client.respond_head(self, status, self.reason, self.headers)

    def on_body(self, body: bytes) -> None:
        self.seen.append(body)
        if not self.skip and not self.done and self.client is not None:
            self.client.respond_body(self, body)

    def on_message_complete(self) -> None:
        self.at_start = True
        if self.skip:
            self.skip = False
            return
        self.done = True  # answered: data_received ends the exchange after this read
