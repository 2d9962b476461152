"""HTTP/1.1 connections into a preview's sandbox, spoken with h11 (no hand-written
parser), over sockets created inside its network namespace (sandbox.netns).

`Pool` keeps idle keep-alive connections per sandbox so a busy preview does not pay a
namespace switch and a connect for every request; `probe` is the health check.
"""

import asyncio
import contextlib
import socket

import h11

from sandbox.netns import Namespace, connect

READ_CHUNK = 64 * 1024


class UpstreamClosed(Exception):
    """The app closed the connection (or broke the protocol) before answering."""


class Upstream:
    """One HTTP/1.1 client connection to the app."""

    def __init__(
        self, sock: socket.socket, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.sock, self.reader, self.writer = sock, reader, writer
        self.conn = h11.Connection(h11.CLIENT)
        self.used = False  # has served a request already (so may be stale when reused)

    @classmethod
    async def open(cls, ns: Namespace, port: int, timeout: float = 5.0) -> "Upstream":
        sock = await connect(ns, port, timeout)
        reader, writer = await asyncio.open_connection(sock=sock, limit=READ_CHUNK)
        return cls(sock, reader, writer)

    async def send(self, event: h11.Event) -> None:
        data = self.conn.send(event)
        if data:
            self.writer.write(data)
            await self.writer.drain()

    async def next_event(self, timeout: float) -> h11.Event:
        """The next event from the app; raises TimeoutError past `timeout` of silence."""
        while True:
            try:
                event = self.conn.next_event()
            except h11.RemoteProtocolError as e:
                raise UpstreamClosed(str(e)) from e
            if event is h11.NEED_DATA:
                data = await asyncio.wait_for(self.reader.read(READ_CHUNK), timeout)
                self.conn.receive_data(data)  # b"" is the end of the stream
                continue
            if isinstance(event, h11.ConnectionClosed):
                raise UpstreamClosed("the app closed the connection")
            return event  # type: ignore[return-value]

    def reusable(self) -> bool:
        """True (and ready for the next request) if both sides finished cleanly."""
        if self.conn.our_state is h11.DONE and self.conn.their_state is h11.DONE:
            self.conn.start_next_cycle()
            self.used = True
            return not self.reader.at_eof()
        return False

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


class Pool:
    """Idle connections per (namespace, port); at most `keep` each."""

    def __init__(self, keep: int = 64) -> None:
        self.keep = keep
        self.idle: dict[tuple[Namespace, int], list[Upstream]] = {}

    async def get(self, ns: Namespace, port: int) -> Upstream:
        idle = self.idle.get((ns, port))
        while idle:
            upstream = idle.pop()
            if not upstream.reader.at_eof():
                return upstream
            upstream.close()
        return await Upstream.open(ns, port)

    def put(self, ns: Namespace, port: int, upstream: Upstream) -> None:
        idle = self.idle.setdefault((ns, port), [])
        if upstream.reusable() and len(idle) < self.keep:
            idle.append(upstream)
        else:
            upstream.close()

    def drop(self, ns: Namespace) -> None:
        """Forget every connection into a namespace (its sandbox is gone)."""
        for key in [k for k in self.idle if k[0] == ns]:
            for upstream in self.idle.pop(key):
                upstream.close()


async def probe(ns: Namespace, port: int, host: str, path: str, timeout: float = 2.0) -> int | None:
    """GET `path` inside the sandbox: the status, 0 if something accepted the
    connection but gave no HTTP answer, None if nothing listens on the port."""
    try:
        upstream = await Upstream.open(ns, port, timeout)
    except (OSError, TimeoutError):
        return None
    try:
        await upstream.send(
            h11.Request(
                method="GET",
                target=path,
                headers=[
                    ("Host", host),
                    ("User-Agent", "berth-health-check"),
                    ("Connection", "close"),
                ],
            )
        )
        await upstream.send(h11.EndOfMessage())
        event = await upstream.next_event(timeout)
        return event.status_code if isinstance(event, h11.Response) else 0
    except (OSError, TimeoutError, UpstreamClosed, h11.LocalProtocolError):
        return 0
    finally:
        upstream.close()
