"""The door of a sandbox's egress proxy: its listening socket, accepted on the runner
agent's loop, and the rate at which it refuses.

A connection past a cap is refused with a 429 that is read for, written and recorded
(sandbox.egress.proxy), which costs the agent's one loop, shared by every team, a little
each time. A sandbox that calls connect() in a tight loop while over its cap would turn
that into a steady cost, so past EGRESS_MAX_REFUSALS_PER_S refusals in a second from one
sandbox, a connection to be refused is closed as soon as it is accepted (a reset:
nothing read, nothing written, no record, no task), and those are counted and recorded
as one summary a second. Hence accepting by hand rather than asyncio's server, which
makes a task and a transport for every connection before anyone can look at it.
"""

import asyncio
import contextlib
import errno
import logging
import socket
import struct
import time
from collections.abc import Callable

log = logging.getLogger("berth.egress")

ACCEPT_BATCH = 64  # connections accepted per wake-up of the loop, at most
ACCEPT_RETRY_S = 1.0  # out of descriptors: accepting stops this long, rather than spin
OUT_OF_RESOURCES = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends a reset, no TIME_WAIT


class RefusalRate:
    """Refusals at one sandbox's door, in the current second of the clock."""

    def __init__(self, limit: int, summarise: Callable[[int, float, float], None]) -> None:
        self.limit = limit
        self.summarise = summarise  # (connections shed, from, to): one record
        self.second = 0
        self.answered = 0
        self.shed = 0
        self.timer: asyncio.TimerHandle | None = None

    def answer(self) -> bool:
        """Whether a connection about to be refused gets its answer and its record;
        False: it is closed unanswered, and counted."""
        now = time.time()
        if int(now) != self.second:
            self.flush()
            self.second, self.answered = int(now), 0
        if self.answered < self.limit:
            self.answered += 1
            return True
        self.shed += 1
        if self.timer is None:
            # The summary is written when the second ends, whatever comes after.
            self.timer = asyncio.get_running_loop().call_later(self.second + 1 - now, self.flush)
        return False

    def flush(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.shed:
            shed, self.shed = self.shed, 0
            self.summarise(shed, float(self.second), float(self.second + 1))


class Door:
    """Accepts on `sock` (bound and listening) and hands each connection to `accepted`,
    synchronously, so caps counted there see every connection in order."""

    def __init__(self, sock: socket.socket, accepted: Callable[[socket.socket], None]) -> None:
        self.sock = sock
        self.accepted = accepted
        self.loop = asyncio.get_running_loop()
        self.open = True
        sock.setblocking(False)
        self.loop.add_reader(sock.fileno(), self._accept)

    def close(self) -> None:
        if self.open:
            self.open = False
            self.loop.remove_reader(self.sock.fileno())
            self.sock.close()

    def _accept(self) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                if e.errno not in OUT_OF_RESOURCES:
                    log.warning("egress proxy: accepting failed: %s", e)
                    return
                log.warning(
                    "egress proxy: out of resources accepting (%s): pausing %s s", e, ACCEPT_RETRY_S
                )
                self.loop.remove_reader(self.sock.fileno())
                self.loop.call_later(ACCEPT_RETRY_S, self._resume)
                return
            self.accepted(conn)

    def _resume(self) -> None:
        if self.open:
            self.loop.add_reader(self.sock.fileno(), self._accept)


def reset(conn: socket.socket) -> None:
    """Close a connection at once: no answer, no lingering state in either namespace."""
    with contextlib.suppress(OSError):
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, RESET)
    conn.close()
