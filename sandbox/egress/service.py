"""The engine loop's egress proxies: one per running sandbox whose network has a policy.

Offered when the engine reports the container's start (the image's wrapper holds the
command back until the proxy accepts), again after an agent restart (reconcile), and
withdrawn at its exit. The sandboxes of one owner (a run's setup and command) share
one budget, so the byte and upstream caps are per owner; connections to the proxy are
counted per sandbox, per team and for the whole agent (`descriptor_caps`). Attempts go
to the owner in order, from one writer task per owner, in batches (a flood of refusals
is a few writes, not one each).
"""

import asyncio
import logging
import resource
from collections.abc import Callable
from typing import Any

from django.conf import settings

from sandbox import backend
from sandbox.egress.attempts import Attempt, Budget, Gauge
from sandbox.egress.proxy import Proxy
from sandbox.models import Sandbox
from sandbox.netns import Namespace, NamespaceGone
from sandbox.owners import owner_of

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


class Egress:
    def __init__(self, db: Callable[[Any], Any]) -> None:
        self.db = db  # the agent's wrapper that runs ORM code off the loop
        self.proxies: dict[str, tuple[str, Proxy]] = {}  # container -> (owner key, proxy)
        self.budgets: dict[str, Budget] = {}  # by owner key ("kind:id")
        self.queues: dict[str, asyncio.Queue[tuple[Sandbox, Attempt] | None]] = {}
        self.writers: set[asyncio.Task[None]] = set()
        agent_cap, self.team_cap = descriptor_caps()
        self.agent = Gauge(
            agent_cap,
            "agent_connection_cap",
            "the most this host's runner agent holds for all sandboxes",
        )
        self.teams: dict[int, Gauge] = {}  # by team pk; a gauge lives as long as the agent

    async def offer(self, sandbox: Sandbox) -> None:
        owner = owner_of(sandbox)
        if sandbox.name in self.proxies or owner is None or not backend.egress_on(sandbox):
            return
        key = f"{sandbox.owner_kind}:{sandbox.owner_id}"
        pid = await asyncio.to_thread(backend.sandbox_pid, sandbox.name)
        if pid is None:
            return  # exited already: nothing to serve
        if key not in self.budgets:
            used = await self.db(lambda: owner.egress_used(sandbox))()
            self.budgets.setdefault(
                key,
                Budget(settings.EGRESS_MAX_BYTES, settings.EGRESS_MAX_CONNECTIONS, used_bytes=used),
            )
        team = self.teams.setdefault(
            sandbox.team_id or 0,
            Gauge(
                self.team_cap,
                "team_connection_cap",
                "your team's limit across its sandboxes (EGRESS_MAX_CONNECTIONS_PER_TEAM)",
            ),
        )
        proxy = Proxy(
            list(sandbox.network.get("egress", [])),
            self.budgets[key],
            lambda attempt: self._record(sandbox, key, attempt),
            (team, self.agent),
        )
        self.proxies[sandbox.name] = (key, proxy)
        try:
            await proxy.listen(Namespace.of_pid(pid))
        except (NamespaceGone, OSError) as e:
            self.proxies.pop(sandbox.name, None)
            log.warning("sandbox %s: egress proxy not offered: %s", sandbox.public_id, e)
            return
        await self.db(lambda: owner.egress_offered(sandbox))()

    async def withdraw(self, sandbox: Sandbox) -> None:
        key = f"{sandbox.owner_kind}:{sandbox.owner_id}"
        if (entry := self.proxies.pop(sandbox.name, None)) is not None:
            await entry[1].close()
        if all(owner != key for owner, _ in self.proxies.values()):
            # A next sandbox of the owner (the command after setup) starts from the
            # totals written so far.
            self.budgets.pop(key, None)
            queue = self.queues.pop(key, None)
            if queue is not None:
                queue.put_nowait(None)  # the writer ends once what is queued is written

    async def close(self) -> None:
        for name in list(self.proxies):
            await self.proxies.pop(name)[1].close()
        for queue in self.queues.values():
            queue.put_nowait(None)
        await asyncio.gather(*self.writers, return_exceptions=True)

    def _record(self, sandbox: Sandbox, key: str, attempt: Attempt) -> None:
        queue = self.queues.get(key)
        if queue is None:
            queue = self.queues[key] = asyncio.Queue()
            task = asyncio.create_task(self._write(queue))
            self.writers.add(task)
            task.add_done_callback(self.writers.discard)
        queue.put_nowait((sandbox, attempt))

    async def _write(self, queue: asyncio.Queue[tuple[Sandbox, Attempt] | None]) -> None:
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
            # In order, each to its sandbox's owner (one owner per queue).
            sandbox = batch[0][0]
            owner = owner_of(sandbox)
            if owner is None:
                continue
            try:
                await self.db(lambda b=batch, o=owner: _hand_over(o, b))()
            except Exception:
                log.exception("recording egress of %s failed", sandbox.owner_id)


def _hand_over(owner: Any, batch: list[tuple[Sandbox, Attempt]]) -> None:
    """Runs of one sandbox at a time, keeping the order they were tried in."""
    run: list[Attempt] = []
    current = batch[0][0]
    for sandbox, attempt in batch:
        if sandbox.pk != current.pk:
            owner.egress_attempts(current, run)
            run, current = [], sandbox
        run.append(attempt)
    owner.egress_attempts(current, run)
