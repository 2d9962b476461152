"""One sandbox's egress proxy: HTTP CONNECT tunnels and plain HTTP, nothing else.

The runner agent creates the listening socket inside the sandbox's network namespace
(sandbox.netns) and serves it on its own loop: the sandbox keeps no interface
but loopback, and the only way out is a request this code decided on. h11 parses
both sides (no hand-written HTTP). Every connection tried becomes one `Attempt`
handed to `record`: refused ones at once, the others when they end, with their bytes.
TLS inside a tunnel is passed through untouched.

Each connection accepted holds a descriptor (two while it has an upstream) in the
agent, which also follows every run's log and ends every team's runs: connections are
counted at the door, per sandbox, per team and for the whole agent (`Gauge`), and one
past a cap is answered 429 at once, before it can hold anything for long (past
EGRESS_MAX_REFUSALS_PER_S refusals a second, closed unanswered: sandbox.egress.door).
Every wait, for the sandbox's request as for a peer to read what was written, ends
after EGRESS_IDLE_TIMEOUT_S.
"""

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import h11
from django.conf import settings

from sandbox.egress import policy
from sandbox.egress.attempts import (
    HOP_BY_HOP,
    Attempt,
    Budget,
    Capped,
    Gauge,
    Refused,
    content_length,
    resolve,
    response,
    target,
)
from sandbox.egress.door import Door, RefusalRate, reset
from sandbox.netns import Namespace, socket_in

log = logging.getLogger("berth.egress")

CHUNK = 256 * 1024
# A connection refused at the door is given this long to send its request (so the
# record names where it wanted to go and a client that spoke first reads the answer
# rather than a reset); at most REFUSING of them wait so per sandbox, the others are
# answered without waiting.
REFUSE_READ_S = 0.2
REFUSING = 8


class Proxy:
    def __init__(
        self,
        entries: list[str],
        budget: Budget,
        record: Callable[[Attempt], None],
        shared: tuple[Gauge, ...] = (),
    ) -> None:
        self.entries = entries
        self.budget = budget
        self.record = record
        self.idle = float(settings.EGRESS_IDLE_TIMEOUT_S)
        self.door: Door | None = None
        self.sessions: set[asyncio.Task[None]] = set()
        # This sandbox's own gauge first, then those it shares (its team's, the agent's).
        self.gauges = (
            Gauge(
                settings.EGRESS_MAX_CONNECTIONS_PER_SANDBOX,
                "sandbox_connection_cap",
                "this sandbox's limit (EGRESS_MAX_CONNECTIONS_PER_SANDBOX)",
            ),
            *shared,
        )
        self.refusing = 0
        self.refusals = RefusalRate(settings.EGRESS_MAX_REFUSALS_PER_S, self._shed)

    async def listen(self, ns: Namespace) -> None:
        sock = socket_in(ns)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            # Bound in the socket's own namespace: its loopback, not the host's.
            sock.bind(("127.0.0.1", policy.PROXY_PORT))
            sock.listen(128)
            self.door = Door(sock, self._accepted)
        except BaseException:
            sock.close()
            raise

    async def close(self) -> None:
        """Stop listening and end every open connection (each is recorded)."""
        if self.door is not None:
            self.door.close()
        self.refusals.flush()
        await asyncio.sleep(0)  # every task accepted so far starts: its `finally` runs
        for task in list(self.sessions):
            task.cancel()
        await asyncio.gather(*self.sessions, return_exceptions=True)

    def _accepted(self, conn: socket.socket) -> None:
        """A connection, as it is accepted: counted now (a batch accepted at once must
        see each other), refused past a cap, closed unanswered past the refusal rate."""
        full = next((g for g in self.gauges if g.open >= g.cap), None)
        if full is not None:
            if not self.refusals.answer():
                reset(conn)
                return
            self._spawn(self._refused(conn, full))
            return
        for gauge in self.gauges:
            gauge.open += 1
        self._spawn(self._served(conn))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self.sessions.add(task)
        task.add_done_callback(self.sessions.discard)

    def _shed(self, count: int, since: float, until: float) -> None:
        """One record for the connections closed unanswered in a second."""
        self.record(
            Attempt(
                "",
                "",
                policy.PROXY_PORT,
                reason="refusal_flood",
                count=count,
                started=since,
                ended=until,
            )
        )

    async def _served(self, conn: socket.socket) -> None:
        try:
            await self._spoken(conn, self._session)
        finally:
            for gauge in self.gauges:
                gauge.open -= 1

    async def _refused(self, conn: socket.socket, full: Gauge) -> None:
        await self._spoken(conn, lambda reader, writer: self._refuse_at_door(reader, writer, full))

    async def _spoken(
        self,
        conn: socket.socket,
        talk: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
    ) -> None:
        """`talk` over an accepted connection, which ends closed whatever happens."""
        try:
            reader, writer = await asyncio.open_connection(sock=conn, limit=CHUNK)
        except BaseException as e:
            conn.close()
            if isinstance(e, OSError):
                return  # gone before it could be served
            raise
        try:
            await talk(reader, writer)
        except (ConnectionError, TimeoutError, h11.ProtocolError):
            pass  # the sandbox's side went away or spoke nonsense: nothing to record
        finally:
            writer.close()

    async def _refuse_at_door(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, full: Gauge
    ) -> None:
        """429 for a connection past a cap, recorded like any refusal: named by its
        request when one came within REFUSE_READ_S, else as a bare connection."""
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=64 * 1024)
        attempt: Attempt | None = None
        if self.refusing < REFUSING:
            self.refusing += 1
            try:
                conn.receive_data(await asyncio.wait_for(reader.read(CHUNK), REFUSE_READ_S))
                if isinstance(event := conn.next_event(), h11.Request):
                    attempt = target(event)[0]
            except (TimeoutError, h11.ProtocolError):
                pass
            finally:
                self.refusing -= 1
        attempt = attempt or Attempt("", "", policy.PROXY_PORT)
        attempt.reason, attempt.ended = full.reason, time.time()
        self.record(attempt)
        writer.write(
            response(
                429,
                f"{full.open} connections to the proxy are open, "
                f"{full.what}; close idle ones (or reuse them) and retry.",
                full.reason,
            )
        )
        with contextlib.suppress(ConnectionError, TimeoutError):
            await asyncio.wait_for(writer.drain(), REFUSE_READ_S)

    async def _session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=64 * 1024)
        while True:
            event = await self._next(conn, reader)
            if not isinstance(event, h11.Request):
                return  # closed (the wrapper's readiness probe, or a client done)
            attempt, path = target(event)
            if attempt is None:
                await self._answer(
                    conn,
                    writer,
                    400,
                    "Berth's egress proxy takes CONNECT host:port or an absolute http:// URL.",
                )
                return
            try:
                if event.method == b"CONNECT":
                    await self._tunnel(conn, event, reader, writer, attempt)
                    return
                await self._forward(conn, event, path, reader, writer, attempt)
            except Refused as refused:
                attempt.reason = refused.reason
                await self._answer(conn, writer, refused.status, refused.message, refused.reason)
                return
            finally:
                attempt.ended = time.time()
                self.record(attempt)
            if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                return
            conn.start_next_cycle()

    async def _next(self, conn: h11.Connection, reader: asyncio.StreamReader) -> object:
        while True:
            event = conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            conn.receive_data(await asyncio.wait_for(reader.read(CHUNK), self.idle))

    async def _answer(
        self,
        conn: h11.Connection,
        writer: asyncio.StreamWriter,
        status: int,
        message: str,
        reason: str = "bad_request",
    ) -> None:
        if conn.our_state is not h11.SEND_RESPONSE:
            return  # a response was under way: the connection just ends
        writer.write(response(status, message, reason))  # and the connection ends
        with contextlib.suppress(ConnectionError, TimeoutError):
            await asyncio.wait_for(writer.drain(), self.idle)

    # -- deciding and connecting -------------------------------------------------------

    async def _open(self, attempt: Attempt) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Check the name, the caps and the address, then connect to that address."""
        host, port = attempt.host, attempt.port
        if not policy.allows(self.entries, host, port):
            raise Refused(
                "not_allowed",
                403,
                f"{host}:{port} is not on this sandbox's egress "
                f"allowlist; to allow it, {policy.how_to_allow(host, port)}.",
            )
        if self.budget.used_bytes >= self.budget.max_bytes:
            raise Refused(
                "byte_cap",
                403,
                f"this run has used its egress allowance of "
                f"{self.budget.max_bytes // 2**20} MB (EGRESS_MAX_MB).",
            )
        if self.budget.active >= self.budget.max_connections:
            raise Refused(
                "connection_cap",
                429,
                f"this run already has "
                f"{self.budget.active} connections open, its limit "
                "(EGRESS_MAX_CONNECTIONS); close some first.",
            )
        fixed = policy.static_address(host)
        candidates = [fixed] if fixed else await resolve(host, port)
        allowed = [a for a in candidates if policy.address_allowed(a)]
        if not candidates:
            raise Refused("resolve_failed", 502, f"{host} does not resolve.")
        if not allowed:
            attempt.address = str(candidates[0])
            raise Refused(
                "address_not_allowed",
                403,
                f"{host} resolves to {candidates[0]}, "
                "which sandboxes may not reach (loopback, private, link-local, "
                "multicast or reserved space); an operator can allow that address "
                "with EGRESS_ALLOWED_ADDRESSES.",
            )
        attempt.address = str(allowed[0])
        try:
            opened = await asyncio.wait_for(
                asyncio.open_connection(attempt.address, port, limit=CHUNK),
                settings.EGRESS_CONNECT_TIMEOUT_S,
            )
        except (OSError, TimeoutError) as e:
            raise Refused(
                "connect_failed",
                502,
                f"could not connect to {host}:{port} ({attempt.address}): {e or 'timed out'}.",
            ) from None
        attempt.allowed = True
        return opened

    def _count(self, attempt: Attempt, n: int, up: bool) -> None:
        if up:
            attempt.bytes_up += n
        else:
            attempt.bytes_down += n
        self.budget.used_bytes += n
        if self.budget.used_bytes > self.budget.max_bytes:
            raise Capped("byte_cap")

    # -- the two ways out ----------------------------------------------------------------

    async def _tunnel(
        self,
        conn: h11.Connection,
        event: h11.Request,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        attempt: Attempt,
    ) -> None:
        await self._next(conn, reader)  # the CONNECT's (empty) end of message
        up_reader, up_writer = await self._open(attempt)
        self.budget.active += 1
        try:
            writer.write(
                conn.send(
                    h11.Response(status_code=200, headers=[], reason=b"Connection Established")
                )
            )
            early, _ = conn.trailing_data
            if early:
                self._count(attempt, len(early), up=True)
                up_writer.write(early)
            await self._splice(attempt, (reader, up_writer, True), (up_reader, writer, False))
        except Capped as capped:
            attempt.reason = str(capped)
        except TimeoutError:
            attempt.reason = "idle_timeout"
        except ConnectionError:
            pass
        finally:
            self.budget.active -= 1
            up_writer.close()

    async def _splice(
        self, attempt: Attempt, *directions: tuple[asyncio.StreamReader, asyncio.StreamWriter, bool]
    ) -> None:
        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, up: bool) -> None:
            while data := await asyncio.wait_for(src.read(CHUNK), self.idle):
                self._count(attempt, len(data), up)
                dst.write(data)
                # A peer that stops reading holds the connection no longer than one
                # that stops writing.
                await asyncio.wait_for(dst.drain(), self.idle)
            with contextlib.suppress(OSError, RuntimeError):
                dst.write_eof()  # half-close: the other direction may still be talking

        tasks = [asyncio.create_task(pipe(*d)) for d in directions]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        finally:
            for task in tasks:
                task.cancel()
        for task in done:
            if (error := task.exception()) is not None:
                raise error

    async def _forward(
        self,
        conn: h11.Connection,
        event: h11.Request,
        path: bytes,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        attempt: Attempt,
    ) -> None:
        up_reader, up_writer = await self._open(attempt)
        self.budget.active += 1
        upstream = h11.Connection(h11.CLIENT)

        def up(data: bytes) -> None:
            self._count(attempt, len(data), up=True)
            up_writer.write(data)

        try:
            # Names keep the client's spelling (raw_items): some servers care.
            headers = [(k, v) for k, v in event.headers.raw_items() if k.lower() not in HOP_BY_HOP]
            up(
                upstream.send(
                    h11.Request(
                        method=event.method,
                        target=path,
                        headers=[*headers, (b"connection", b"close")],
                    )
                )
            )
            while not isinstance(body := await self._next(conn, reader), h11.EndOfMessage):
                if isinstance(body, h11.Data):
                    up(upstream.send(body))
                    await asyncio.wait_for(up_writer.drain(), self.idle)
            up(upstream.send(h11.EndOfMessage()))
            while True:
                answer = await self._next_counted(upstream, up_reader, attempt)
                if isinstance(answer, h11.InformationalResponse):
                    continue  # 100 Continue and the like concern this hop only
                break
            if not isinstance(answer, h11.Response) or answer.status_code == 101:
                raise Refused(
                    "bad_upstream",
                    502,
                    f"{attempt.host}:{attempt.port} did not answer with an HTTP response.",
                )
            head = [(k, v) for k, v in answer.headers.raw_items() if k.lower() not in HOP_BY_HOP]
            length = content_length(answer, event.method)
            if length is not None:
                # A body of known length goes through as raw bytes, not h11 events (a
                # large download would otherwise be parsed and copied twice more), and
                # the client's connection closes after it, as this said.
                head.append((b"connection", b"close"))
            writer.write(
                conn.send(
                    h11.Response(status_code=answer.status_code, reason=answer.reason, headers=head)
                )
            )
            if length is not None:
                await self._raw_body(upstream, up_reader, writer, attempt, length)
                return
            while isinstance(
                part := await self._next_counted(upstream, up_reader, attempt), h11.Data
            ):
                writer.write(conn.send(part))
                await asyncio.wait_for(writer.drain(), self.idle)
            writer.write(conn.send(h11.EndOfMessage()))
        except Capped as capped:
            attempt.reason = str(capped)
            writer.close()
        except TimeoutError:
            attempt.reason = "idle_timeout"
            writer.close()
        except h11.ProtocolError:
            if conn.our_state is h11.SEND_RESPONSE:
                raise Refused(
                    "bad_upstream", 502, f"{attempt.host}:{attempt.port} broke the HTTP exchange."
                ) from None
            writer.close()
        finally:
            self.budget.active -= 1
            up_writer.close()

    async def _raw_body(
        self,
        upstream: h11.Connection,
        up_reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        attempt: Attempt,
        length: int,
    ) -> None:
        """`length` bytes of body from upstream to the client: first what h11 already
        holds (counted when it was read), then straight from the socket."""
        sent = 0
        while isinstance(part := upstream.next_event(), h11.Data):
            writer.write(part.data)
            sent += len(part.data)
        loop = asyncio.get_running_loop()
        async with asyncio.timeout_at(loop.time() + self.idle) as idle:  # one timer, re-armed
            while sent < length:
                data = await up_reader.read(min(CHUNK, length - sent))
                if not data:
                    break  # upstream closed early: the client sees a short body
                self._count(attempt, len(data), up=False)
                writer.write(data)
                sent += len(data)
                await writer.drain()
                idle.reschedule(loop.time() + self.idle)
        writer.close()

    async def _next_counted(
        self, conn: h11.Connection, reader: asyncio.StreamReader, attempt: Attempt
    ) -> object:
        while True:
            event = conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            data = await asyncio.wait_for(reader.read(CHUNK), self.idle)
            self._count(attempt, len(data), up=False)
            conn.receive_data(data)
