"""The runner agent's egress proxies: one per running sandbox whose run has a policy.

Offered when the engine reports the container's start (the image's wrapper holds the
command back until the proxy accepts), again after an agent restart (reconcile), and
withdrawn at its exit. A run's setup and command containers share one budget, so the
byte and upstream caps are per run; connections to the proxy are counted per sandbox,
per team and for the whole agent (`descriptor_caps`). Attempts are written in order by
one writer task per run, in batches (a flood of refusals is a few writes, not one each).
"""

import asyncio
import datetime
import logging
import resource
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.utils import timezone

from runs.models import EgressEvent, Run
from sandbox import backend
from sandbox.egress.attempts import Attempt, Budget, Gauge
from sandbox.egress.proxy import Proxy
from sandbox.netns import Namespace, NamespaceGone

log = logging.getLogger("berth.egress")

# Descriptors the agent keeps for itself, whatever the sandboxes do: each followed
# container's output stream, engine and database connections, threads, log files.
RESERVE_FDS = 512
BATCH = 500  # attempts written in one database call at most


def descriptor_caps() -> tuple[int, int]:
    """(connections all proxies may hold together, connections one team may hold),
    after raising this process's soft descriptor limit to its hard one.

    The arithmetic: a connection to a proxy holds one descriptor in the agent, two
    while it has an upstream, so N connections hold at most 2N. All proxies together
    get (limit - RESERVE_FDS) / 2 connections; one team at most half of that (and no
    more than EGRESS_MAX_CONNECTIONS_PER_TEAM). Each sandbox adds one listener and at
    most REFUSING connections being refused, and a team has few sandboxes at once (its
    run and preview quotas). So one team holds at most about a quarter of the limit,
    never all of it, and all teams together leave RESERVE_FDS to the agent's own work.
    With the defaults, a team's 256 connections are at most 512 descriptors: a soft
    limit of 1024 (systemd's default) could not carry it, hence the raise; its hard
    limit (524288 under systemd) can.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = 1 << 20
    if soft != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    limit = hard if soft == resource.RLIM_INFINITY else soft
    agent = max(0, (limit - RESERVE_FDS) // 2)
    team = min(settings.EGRESS_MAX_CONNECTIONS_PER_TEAM, agent // 2)
    if team < settings.EGRESS_MAX_CONNECTIONS_PER_TEAM:
        log.warning(
            "descriptor limit %d: each team may hold %d connections to its egress "
            "proxies, not EGRESS_MAX_CONNECTIONS_PER_TEAM=%d; raise the agent's "
            "limit (LimitNOFILE) to allow more",
            limit,
            team,
            settings.EGRESS_MAX_CONNECTIONS_PER_TEAM,
        )
    return agent, team


def _when(t: float | None) -> datetime.datetime | None:
    return datetime.datetime.fromtimestamp(t, datetime.UTC) if t is not None else None


class Egress:
    def __init__(self, db: Callable[[Any], Any]) -> None:
        self.db = db  # the agent's wrapper that runs ORM code off the loop
        self.proxies: dict[str, tuple[str, Proxy]] = {}  # container -> (run id, proxy)
        self.budgets: dict[str, Budget] = {}  # by run id
        self.queues: dict[str, asyncio.Queue[tuple[str, Attempt] | None]] = {}
        self.writers: set[asyncio.Task[None]] = set()
        agent_cap, self.team_cap = descriptor_caps()
        self.agent = Gauge(
            agent_cap,
            "agent_connection_cap",
            "the most this host's runner agent holds for all sandboxes",
        )
        self.teams: dict[int, Gauge] = {}  # by team pk; a gauge lives as long as the agent

    async def offer(self, run_id: str, container: str, phase: str) -> None:
        if container in self.proxies:
            return
        run = await self.db(
            lambda: Run.objects.select_related("workspace").filter(public_id=run_id).first()
        )()
        if run is None or not run.is_active or run.network.get("mode") != "proxy":
            return
        pid = await asyncio.to_thread(backend.sandbox_pid, container)
        if pid is None:
            return  # exited already: nothing to serve
        budget = self.budgets.setdefault(
            run_id,
            Budget(
                settings.EGRESS_MAX_BYTES,
                settings.EGRESS_MAX_CONNECTIONS,
                used_bytes=run.egress_bytes_up + run.egress_bytes_down,
            ),
        )
        team = self.teams.setdefault(
            run.workspace.team_id,
            Gauge(
                self.team_cap,
                "team_connection_cap",
                "your team's limit across its sandboxes (EGRESS_MAX_CONNECTIONS_PER_TEAM)",
            ),
        )
        proxy = Proxy(
            list(run.network.get("egress", [])),
            budget,
            lambda attempt: self._record(run, phase, attempt),
            (team, self.agent),
        )
        self.proxies[container] = (run_id, proxy)
        try:
            await proxy.listen(Namespace.of_pid(pid))
        except (NamespaceGone, OSError) as e:
            self.proxies.pop(container, None)
            log.warning("run %s: egress proxy not offered in %s: %s", run_id, container, e)
            return
        await self.db(
            lambda: Run.objects.filter(pk=run.pk, egress_offered_at=None).update(
                egress_offered_at=timezone.now()
            )
        )()

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
        ended = False
        while not ended:
            item = await queue.get()
            if item is None:
                break
            batch = [item]
            while len(batch) < BATCH and not queue.empty():
                if (more := queue.get_nowait()) is None:
                    ended = True
                    break
                batch.append(more)
            rows = [
                EgressEvent(
                    run_id=run_pk,
                    phase=p,
                    method=a.method[:16],
                    host=a.host[:255],
                    port=a.port,
                    address=a.address,
                    allowed=a.allowed,
                    reason=a.reason,
                    bytes_up=a.bytes_up,
                    bytes_down=a.bytes_down,
                    started_at=_when(a.started) or timezone.now(),
                    ended_at=_when(a.ended),
                    count=a.count,
                )
                for p, a in batch
            ]
            try:
                await self.db(lambda r=rows: EgressEvent.record(run_pk, r))()
            except Exception:
                log.exception("recording egress of run %s failed", run_pk)
