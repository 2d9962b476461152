"""The runner agent's egress proxies: one per running sandbox whose run has a policy.

Offered when the engine reports the container's start (the image's wrapper holds the
command back until the proxy accepts), again after an agent restart (reconcile), and
withdrawn at its exit. A run's setup and command containers share one budget, so the
caps are per run. Attempts are written in order by one writer task per run.
"""

import asyncio
import datetime
import logging
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.utils import timezone

from runner import sandbox
from runner.egress.proxy import Attempt, Budget, Proxy
from runner.models import EgressEvent, Run
from runner.sandbox.netns import Namespace, NamespaceGone

log = logging.getLogger("berth.egress")


def _when(t: float | None) -> datetime.datetime | None:
    return datetime.datetime.fromtimestamp(t, datetime.UTC) if t is not None else None


class Egress:
    def __init__(self, db: Callable[[Any], Any]) -> None:
        self.db = db  # the agent's wrapper that runs ORM code off the loop
        self.proxies: dict[str, tuple[str, Proxy]] = {}  # container -> (run id, proxy)
        self.budgets: dict[str, Budget] = {}  # by run id
        self.queues: dict[str, asyncio.Queue[tuple[str, Attempt] | None]] = {}
        self.writers: set[asyncio.Task[None]] = set()

    async def offer(self, run_id: str, container: str, phase: str) -> None:
        if container in self.proxies:
            return
        run = await self.db(lambda: Run.objects.filter(public_id=run_id).first())()
        if run is None or not run.is_active or run.network.get("mode") != "proxy":
            return
        pid = await asyncio.to_thread(sandbox.sandbox_pid, container)
        if pid is None:
            return  # exited already: nothing to serve
        budget = self.budgets.setdefault(run_id, Budget(
            settings.EGRESS_MAX_BYTES, settings.EGRESS_MAX_CONNECTIONS,
            used_bytes=run.egress_bytes_up + run.egress_bytes_down))
        proxy = Proxy(list(run.network.get("egress", [])), budget,
                      lambda attempt: self._record(run, phase, attempt))
        self.proxies[container] = (run_id, proxy)
        try:
            await proxy.listen(Namespace.of_pid(pid))
        except (NamespaceGone, OSError) as e:
            self.proxies.pop(container, None)
            log.warning("run %s: egress proxy not offered in %s: %s", run_id, container, e)
            return
        await self.db(lambda: Run.objects.filter(pk=run.pk, egress_offered_at=None).update(
            egress_offered_at=timezone.now()))()

    async def withdraw(self, run_id: str, container: str) -> None:
        if (entry := self.proxies.pop(container, None)) is not None:
            await entry[1].close()
        if all(owner != run_id for owner, _ in self.proxies.values()):
            # A next container of the run (the command after setup) starts from the
            # totals written so far.
            self.budgets.pop(run_id, None)
            queue = self.queues.pop(run_id, None)
            if queue is not None:
                queue.put_nowait(None)  # the writer ends once what is queued is written

    async def close(self) -> None:
        for name in list(self.proxies):
            await self.proxies.pop(name)[1].close()
        for queue in self.queues.values():
            queue.put_nowait(None)
        await asyncio.gather(*self.writers, return_exceptions=True)

    def _record(self, run: Run, phase: str, attempt: Attempt) -> None:
        queue = self.queues.get(run.public_id)
        if queue is None:
            queue = self.queues[run.public_id] = asyncio.Queue()
            task = asyncio.create_task(self._write(run.pk, queue))
            self.writers.add(task)
            task.add_done_callback(self.writers.discard)
        queue.put_nowait((phase, attempt))

    async def _write(self, run_pk: int, queue: asyncio.Queue[tuple[str, Attempt] | None]) -> None:
        while (item := await queue.get()) is not None:
            phase, a = item
            try:
                await self.db(lambda p=phase, a=a: EgressEvent.record(
                    run_pk, p, method=a.method[:16], host=a.host[:255], port=a.port,
                    address=a.address, allowed=a.allowed, reason=a.reason,
                    bytes_up=a.bytes_up, bytes_down=a.bytes_down,
                    started_at=_when(a.started), ended_at=_when(a.ended)))()
            except Exception:
                log.exception("recording egress of run %s failed", run_pk)
