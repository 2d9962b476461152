"""The runner agent: one long-lived asyncio process per Docker host (docs/architecture.md).

A composition root: it wires the engine loop (sandbox.loop), which carries every live
sandbox of this host to its end reading Sandbox rows alone, to the owners that register
with it, and adds the periodic work of the apps above the sandbox layer:
- runs (runs.engine_owner): follow each sandbox's output into its run's log, write the
  run's end, find runs no container carries, send prepare tasks the broker missed;
- previews (previews.watch): health-check previews, stop idle ones, woken when a
  container starts;
- deploys (deploys.releasing.restore_all): bring live releases back after a restart;
- sessions (sessions.keeper): hand execs to each session's exec channel, freeze,
  thaw, stop and delete sessions by their clocks; and (sessions.terminal_relay) carry
  terminals' bytes between daphne and the shells in the sandboxes, and record them.
"""

import asyncio
import logging

from django.conf import settings

from deploys.releasing import restore_all
from previews.watch import Watcher
from runs.engine_owner import RunOwner
from runs.models import OWNER
from sandbox import heartbeat
from sandbox.hosts import Host
from sandbox.loop import EngineLoop, db, on_thread
from sandbox.owners import register
from sessions.keeper import Keeper
from sessions.terminal_relay import TerminalRelay

log = logging.getLogger("berth.runner_agent")

# How often runs whose prepare task never reached the broker (it was down) are looked
# for: they go as soon as it answers again, not a whole reconcile later.
UNDELIVERED_EVERY_S = 2.0


class Agent(EngineLoop):
    """The engine loop with this process's owners registered and their jobs added."""

    def __init__(self) -> None:
        super().__init__()
        self.runs: RunOwner | None = None
        # Set when another engine took this host's name: the agent stops (its command
        # exits with the reason).
        self.refused: heartbeat.HostRefused | None = None

    def _wire(self) -> RunOwner:
        if self.runs is None:
            self.runs = RunOwner(asyncio.get_running_loop())
            register(OWNER, self.runs)
        return self.runs

    async def run(self, stop: asyncio.Event) -> None:
        runs = self._wire()
        # Before anything is touched: a host Berth does not know acts on nothing.
        host: Host = await on_thread(heartbeat.claim)()

        async def beat() -> None:
            try:
                await on_thread(heartbeat.beat)(host.name)
            except heartbeat.HostRefused as refused:
                log.error("stopping: %s", refused)
                self.refused = refused
                stop.set()

        await self.safely(beat)
        consume = self.start_events(stop)
        log.info("runner agent started (host %s, instance %s)", host.name, settings.BERTH_INSTANCE)
        await self.safely(self.reconcile)
        watcher = Watcher()
        keeper = Keeper(self)
        relay = TerminalRelay(self, keeper.resume)
        keeper.on_grant = relay.mask_grants
        jobs = [
            consume,
            *self.jobs(stop),
            asyncio.create_task(self.every(watcher.TICK_S, watcher.tick, stop, self.started_event)),
            asyncio.create_task(self.every(UNDELIVERED_EVERY_S, runs.send_undelivered, stop)),
            *keeper.jobs(stop),
            asyncio.create_task(self.every(settings.HOST_HEARTBEAT_S, beat, stop)),
            *relay.jobs(stop),
        ]
        await stop.wait()
        for job in jobs:
            job.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)
        await self.egress.close()

    async def tick(self) -> None:
        self._wire()
        await super().tick()

    async def reconcile(self) -> None:
        self._wire()
        await super().reconcile()
        await db(restore_all)()


def reconcile_once() -> None:
    heartbeat.claim()
    asyncio.run(Agent().reconcile())
