"""The answers side of the preview gateway's connection to a browser
(previews.relay.Client): the app's (or the web process's) answer written back in
order, the web process's verdict carried out, a WebSocket handed over
(previews.tunnel), the gateway's own answers, and the connection's end.
"""

import asyncio
from collections import deque
from typing import Any

from websockets.asyncio.connection import Connection

from previews import gate, pages, tunnel
from previews.framing import FRAMING, Exchange, answer_head, chunk, own_answer
from previews.gateway import Gateway, Route
from previews.headers import HOP_BY_HOP, connection_named
from previews.relay_upstream import Again, Upstream

BACKLOG = 8  # pipelined requests parsed ahead of their turn before reading stops
LINGER_S = 5  # how long a body nobody will read is discarded before the connection ends


class Answering:
    """What `Client` writes back; its state is the client's."""

    gw: Gateway
    transport: Any
    loop: asyncio.AbstractEventLoop
    queue: deque[Exchange]
    paused: set[str]
    gone: bool
    close_after: bool
    no_more: bool
    lingering: bool
    timer: asyncio.TimerHandle | None
    out: list[bytes] | None
    again: Again | None
    answered: tuple[Any, tuple[bytes, str, bool, bool]]

    def _dispatch(self, ex: Exchange) -> None:
        raise NotImplementedError

    def _go(self, ex: Exchange, route: Route) -> None:
        raise NotImplementedError

    async def _connect(self, ex: Exchange, route: Route) -> None:
        raise NotImplementedError

    def _resume(self, why: str) -> None:
        raise NotImplementedError

    def write(self, data: bytes) -> None:
        if self.out is not None:
            self.out.append(data)
        else:
            self.transport.write(data)

    def batch(self) -> list[bytes]:
        self.out = []
        return self.out

    def flush(self) -> None:
        out, self.out = self.out, None
        if out and not self.gone:
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))

    # -- answers -----------------------------------------------------------------------

    def respond_head(
        self, upstream: Upstream, status: int, reason: bytes, given: list[tuple[bytes, bytes]]
    ) -> None:
        ex = upstream.ex
        assert ex is not None and ex.route is not None
        if ex.route.kind == "app":
            verdict = next((v for k, v in given if k == gate.VERDICT), None)
            if verdict is not None:
                upstream.verdict = verdict  # carried out once its (empty) answer ends
                return
        frames = self.gw.frames_for(ex.route) if ex.route.kind == "sandbox" else None
        key = (
            status,
            reason,
            given,
            ex.route.kind,
            ex.host,
            ex.method == b"HEAD",
            ex.version,
            ex.keep_alive,
            self.close_after,
            frames,
        )
        if key != self.answered[0]:
            self.answered = (key, answer_head(ex, status, reason, given, self.close_after, frames))
        head, upstream.mode, upstream.eof_ends, self.close_after = self.answered[1]
        self.write(head)
        ex.answered = True
        if ex.method == b"HEAD":
            upstream.keep = False  # llhttp cannot be told the answer had no body
            upstream.done = True

    def respond_body(self, upstream: Upstream, data: bytes) -> None:
        if upstream.verdict is not None:
            return
        if upstream.mode == "chunked":
            self.write(chunk(data))
        else:
            self.write(data)

    def respond_end(self, upstream: Upstream) -> None:
        ex = upstream.ex
        if ex is None:
            return
        if upstream.verdict is not None:
            self._decided(ex, upstream)
            return
        if upstream.mode == "chunked":
            self.write(b"0\r\n\r\n")
        if self.out is not None:
            self.flush()  # before the connection may close, or the next answer start
        upstream.ex = None
        upstream.client = None
        if not ex.ended:
            self.close_after = True  # answered before the body was all sent: no reuse
        if upstream.reusable(ex.ended or ex.route is None or ex.route.kind == "app"):
            upstream.used = True
            self.gw.keep(upstream.key, upstream)
        else:
            upstream.close()
        self._finish(ex)

    def upstream_lost(self, upstream: Upstream) -> None:
        """The connection to the app (or the web process) ended mid-exchange."""
        ex = upstream.ex
        if ex is None or self.gone:
            return
        if ex.answered:
            if upstream.eof_ends:
                self.respond_end(upstream)  # a body that ends with the connection: done
            else:
                self.transport.abort()  # cut short: the client must see it was
            return
        assert ex.route is not None
        if (
            upstream.used
            and not upstream.got
            and not ex.retried
            and (ex.route.kind == "app" or (ex.ended and not ex.length and not ex.chunked))
        ):
            # A kept-alive connection the other side had closed: once more, anew.
            ex.retried = True
            ex.upstream = upstream.ex = None
            self.loop.create_task(self._connect(ex, ex.route))
            return
        who = "The app" if ex.route.kind == "sandbox" else "Berth's web process"
        self._answer(
            ex,
            502,
            "app_broke_request",
            f"{who} closed the connection without answering.",
            title="The app broke this request",
        )

    def _decided(self, ex: Exchange, upstream: Upstream) -> None:
        """The web process said "serve it": the request goes into the sandbox, with the
        body kept meanwhile (and the rest as it comes)."""
        verdict, upstream.verdict = upstream.verdict, None
        since = upstream.since
        assert verdict is not None
        upstream.ex = upstream.client = None
        ex.upstream = None
        if upstream.reusable(True):
            upstream.used = True
            self.gw.keep(upstream.key, upstream)
        else:
            upstream.close()
        if self.gone or ex.answered:
            return
        self._go(ex, self.gw.admit(ex, self.gw.verdict(ex, verdict, since)))

    def relay_answer(
        self, ex: Exchange, status: int, given: list[tuple[bytes, bytes]], body: bytes
    ) -> None:
        """The web process's answer to a WebSocket handshake's question (a refusal),
        sent on whole; the connection ends with it."""
        if self.gone:
            return
        named = connection_named(given)
        drop = HOP_BY_HOP | FRAMING | named
        self.close_after = True
        self.flush()
        headers = [(k, v) for k, v in given if k not in drop]
        self.transport.write(own_answer(status, headers, body, None, True))
        ex.answered = True
        self._finish(ex)

    def hand_over(self, ex: Exchange, subprotocol: Any, limit: int) -> Connection | None:
        """The browser's handshake answered; accepted, the connection is the
        WebSocket's from here on (previews.tunnel), and this protocol is done with it."""
        if self.gone:
            return None
        conn, sent = tunnel.accept(ex, subprotocol, limit)
        self.flush()
        self.transport.write(sent)
        ex.answered = True
        if conn is None:  # not a handshake websockets takes: ended with its answer
            self.close_after = True
            self._finish(ex)
            return None
        self.gone = True
        if self.timer:
            self.timer.cancel()
        self.queue.clear()
        transport = self.transport
        transport.set_protocol(conn)
        conn.connection_made(transport)
        if ex.tail:
            conn.data_received(ex.tail)
        transport.resume_reading()
        return conn

    def _too_large(self, ex: Exchange) -> None:
        if ex.answered:
            self.transport.abort()
            return
        self.close_after, big = True, self.gw.too_large
        self._answer(ex, big.status, big.code, big.message, big.title)

    def _answer(
        self,
        ex: Exchange,
        status: int,
        code: str,
        message: str,
        title: str = "",
        queued: bool = True,
        refresh: bool = False,
    ) -> None:
        """The gateway's own answer (the API's error shape, or a page for a browser,
        which loads itself again after a second with `refresh`); it ends the
        connection when the request's body was not read to its end."""
        if ex.upstream is not None:
            ex.upstream.ex = None
            ex.upstream.close()
            ex.upstream = None
        status, headers, body = pages.answer(
            status,
            code,
            message,
            title=title,
            # A refused upgrade is read by a script, not shown: the error shape.
            json_wanted=ex.upgrade or pages.wants_json(dict(ex.headers)),
            refresh=refresh,
        )
        if not ex.ended or not ex.keep_alive or ex.upgrade:
            self.close_after = True
        self.flush()
        self.transport.write(
            own_answer(status, headers, body, self.gw.frames_for(ex.route), self.close_after)
        )
        ex.answered = True
        if queued:
            self._finish(ex)
        else:
            self._close(unread=True)  # the rest of what it sent is unread

    def _finish(self, ex: Exchange) -> None:
        self._uncount(ex)
        ex.pending.clear()
        if self.queue and self.queue[0] is ex:
            self.queue.popleft()
        if self.close_after or (self.no_more and not self.queue):
            self._close(unread=not ex.ended)
            return
        if self.paused:
            self._resume("upstream")  # that upstream's buffer is not this client's now
            self._resume("buffer")
            if len(self.queue) <= BACKLOG:
                self._resume("backlog")
        if self.queue:
            self._dispatch(self.queue[0])

    def _close(self, unread: bool) -> None:
        """End the connection once what is buffered is written (idle aborts it).

        With a body the client may still be sending and nobody will read (an early
        answer, a 413), closing would reset the connection, and a reset can destroy the
        answer before the client reads it. So then: end our side after the answer,
        discard what comes, and close when the client does, or after LINGER_S."""
        if not unread or not self.transport.can_write_eof():
            self.transport.close()
            return
        self.lingering = True
        self.transport.write_eof()
        self.paused.clear()
        self.transport.resume_reading()
        if self.timer:
            self.timer.cancel()
        self.timer = self.loop.call_later(LINGER_S, self.transport.abort)

    def _uncount(self, ex: Exchange) -> None:
        if ex.counted and ex.route is not None and ex.route.target is not None:
            ex.counted = False
            self.gw.closed(ex.route.target)
