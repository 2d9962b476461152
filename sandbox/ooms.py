"""The containers the engine reported an OOM kill in, from its `oom` events.

Docker 20.10 sets a container's `OOMKilled` only when the shim's OOM event reaches
dockerd before the exit; under load the two may come the other way round, and then
the container's inspect says `OOMKilled: false` for ever while an `oom` event follows
its `die` (seen here under gVisor with both CPUs busy: 4 memory kills in 60).
So an exit by SIGKILL that no stop asked for waits a moment for that late event before
its end is written: without it, a session's exec that ran gVisor's sandbox out of
memory would end `session_stopped`, and a run `failed` instead of `oom_killed`.
"""

import asyncio
import time

# How long after its `die` a late `oom` event is awaited (18 to 35 ms after it in the
# cases seen; the wait is paid only by a SIGKILL exit that no stop asked for and whose
# OOM flag the engine did not set).
LATE_S = 2.0
# An event nobody took (its container's end was written before it came) is forgotten
# after this; container ids are never reused, so it could mislead no other container.
KEEP_S = 60.0


class OomEvents:
    def __init__(self) -> None:
        self.seen: dict[str, float] = {}  # container id: when its oom event came
        self.waiting: dict[str, asyncio.Event] = {}

    def saw(self, container_id: str) -> None:
        now = time.monotonic()
        for old in [c for c, at in self.seen.items() if now - at > KEEP_S]:
            del self.seen[old]
        self.seen[container_id] = now
        waiter = self.waiting.get(container_id)
        if waiter is not None:
            waiter.set()

    def take(self, container_id: str) -> bool:
        """Whether an oom event came for it (forgotten once taken)."""
        return self.seen.pop(container_id, None) is not None

    async def late(self, container_id: str, within: float = LATE_S) -> bool:
        """Whether an oom event came for it, or comes within `within` seconds."""
        if self.take(container_id):
            return True
        waiter = self.waiting.setdefault(container_id, asyncio.Event())
        try:
            await asyncio.wait_for(waiter.wait(), within)
        except TimeoutError:
            pass
        finally:
            self.waiting.pop(container_id, None)
        return self.take(container_id)
