"""What a run does when the engine loop tells it about one of its sandboxes.

Registered under the owner kind "run" by the runner agent process (agent.loop): the
loop (sandbox.loop) reads Sandbox rows only, and this handler carries the run: it
follows each container's output into the run's log, writes the run's end once the log
is complete, counts CPU and egress on the run, and finds the runs no container carries.
"""

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, models
from django.utils import timezone

from logs.follow import Follower
from runs import caches, ending, quotas, secrets, tasks
from runs.models import ACTIVE_STATES, DepCache, EgressEvent, Run, RunState, TeamCpuDay
from runs.outcomes import describe
from runs.prepare import remove_run
from sandbox.engine import engine
from sandbox.loop import db, on_thread
from sandbox.models import Sandbox, SandboxKind, this_host

log = logging.getLogger("berth.runner_agent")

# A queued run no worker has picked up by then is sent again (the task is idempotent).
STALE_PREPARING = timedelta(seconds=settings.RUN_STALE_QUEUED_S)
RUNNING_GRACE = timedelta(seconds=15)  # a just-started run may not be listed yet


def masker_of(run_id: str) -> secrets.Masker:
    """The values the run was granted (sealed for this host when it was placed), masked
    before a line is stored (a value split across two 16 KB pieces of one long line is
    the one case this cannot see). Asked on the follower's own thread."""
    try:
        sealed = (
            Run.objects.filter(public_id=run_id).values_list("secrets_sealed", flat=True).first()
        )
        values = secrets.open_sealed(sealed or "")
    finally:
        connection.close()  # that thread asks nothing more of the database
    return secrets.Masker(values.values())


# How a sandbox's output is followed, by its kind when not as a run's log: the room
# above that owns the kind registers its own (sessions demultiplex their execs' output).
FOLLOWERS: dict[str, Callable[[str, Sandbox, asyncio.AbstractEventLoop], Follower]] = {}


def phase_of(sandbox: Sandbox) -> str:
    return "setup" if sandbox.kind == SandboxKind.SETUP else "main"


def _when(t: float | None) -> datetime | None:
    return datetime.fromtimestamp(t, UTC) if t is not None else None


class LogNotStored(Exception):
    """A run's follower could not hand its log to the web host: the run is left for the
    next reconcile."""


class RunOwner:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        # By container name: a run with a [setup] step has two containers, one after
        # the other, whose output goes into the one log of the run.
        self.followers: dict[str, Follower] = {}
        # /deps volumes the engine refused to remove (a container still mounts one):
        # tried again each sweep, but said once, not every RECONCILE_EVERY_S for good.
        self.refused: set[str] = set()

    def follow(self, run_id: str, sandbox: Sandbox) -> None:
        container = sandbox.name
        current = self.followers.get(container)
        if current is not None and (current.is_alive() or current.ended):
            return
        special = FOLLOWERS.get(sandbox.kind)
        follower = (
            special(run_id, sandbox, self.loop)
            if special
            else Follower(
                run_id,
                container,
                self.loop,
                lambda: masker_of(run_id),
                framed=sandbox.output_framed,
            )
        )
        self.followers[container] = follower
        follower.start()

    async def started(self, sandbox: Sandbox) -> None:
        self.follow(sandbox.owner_id, sandbox)

    async def exited(
        self, sandbox: Sandbox, facts: dict[str, Any] | None, note: str | None
    ) -> None:
        """Wait for the whole log, then either go on to the command (a setup step that
        succeeded) or write the run's end and remove its sandboxes."""
        run_id, setup = sandbox.owner_id, sandbox.kind == SandboxKind.SETUP
        self.follow(run_id, sandbox)  # drain what the engine kept, if not yet
        outputs: asyncio.Future[Any] | None = None
        try:
            # A run's files are final once its container died: they are read back while
            # the log drains (what was read goes unused if the run ends otherwise).
            if not setup and facts is not None:
                outputs = asyncio.ensure_future(on_thread(ending.early_outputs)(run_id))
            follower = self.followers.get(sandbox.name)
            if follower is not None:
                # The end is written only once the whole log is stored, however long a
                # flood takes to drain: a run's log is complete when the run is.
                await asyncio.to_thread(follower.done.wait)
                if follower.failed:
                    # Not ended on a log the web host did not take whole: its container
                    # stays, and the next reconcile follows it again from the web
                    # host's cursor (the engine still holds the rest).
                    self.followers.pop(sandbox.name, None)
                    raise LogNotStored(f"run {run_id}: its log was not stored whole")
            if setup and await on_thread(ending.end_setup)(sandbox, facts, note):
                pass  # the command runs now; the loop removes the setup sandbox
            else:
                if not setup:
                    await on_thread(ending.end_run)(
                        run_id,
                        facts,
                        follower.bytes if follower else None,
                        outputs=await outputs if outputs is not None else None,
                        sandbox=sandbox,
                        disk_note=note,
                    )
                run = await db(lambda: Run.objects.filter(public_id=run_id).first())()
                if run is not None and not run.is_active:
                    await on_thread(remove_run)(run)
            self.followers.pop(sandbox.name, None)
        finally:
            if outputs is not None:
                # Never left running past this end (a later one would read the same
                # files at the same time), its error never left unretrieved.
                await asyncio.gather(outputs, return_exceptions=True)

    def cpu_used(self, sandbox: Sandbox, grew: float) -> None:
        run = Run.objects.select_related("workspace").filter(public_id=sandbox.owner_id).first()
        if run is None:
            return
        run.record_cpu(phase_of(sandbox), sandbox.cpu_seconds)
        TeamCpuDay.add(run.workspace.team_id, grew)

    def egress_used(self, sandbox: Sandbox) -> int:
        used = (
            Run.objects.filter(public_id=sandbox.owner_id)
            .values_list(models.F("egress_bytes_up") + models.F("egress_bytes_down"), flat=True)
            .first()
        )
        return int(used or 0)

    def egress_offered(self, sandbox: Sandbox) -> None:
        Run.mark_egress_offered(sandbox.owner_id)

    def egress_attempts(self, sandbox: Sandbox, attempts: list[Any]) -> None:
        run_pk = Run.objects.filter(public_id=sandbox.owner_id).values_list("pk", flat=True).first()
        if run_pk is None:
            return
        phase = phase_of(sandbox)
        EgressEvent.record(
            run_pk,
            [
                EgressEvent(
                    run_id=run_pk,
                    phase=phase,
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
                for a in attempts
            ],
        )

    def present(self, owner_ids: set[str]) -> set[str]:
        return set(Run.objects.filter(public_id__in=owner_ids).values_list("public_id", flat=True))

    async def reconciled(self, carried: set[str]) -> None:
        stale = await db(lost_runs)(carried)
        if stale:
            await on_thread(tasks.send_again)(
                stale, f"no worker carried them on within {STALE_PREPARING.seconds} s"
            )
        await self._sweep_deps()

    async def send_undelivered(self) -> None:
        """Runs accepted while the broker was down: their prepare task, now. Sent on a
        thread of its own: a broker that is still down makes each try wait a moment,
        which must not hold up the other runs' ORM calls."""
        run_ids = await db(tasks.undelivered_runs)()
        if run_ids:
            await on_thread(tasks.send_again)(run_ids, "the broker had not received them")

    async def _sweep_deps(self) -> None:
        """/deps volumes a setup step filled that did not become a cache (it failed, or
        a concurrent run of the same key won) and whose run has ended."""
        deps = await asyncio.to_thread(
            lambda: engine().volumes.list(
                filters={"label": [f"berth.instance={settings.BERTH_INSTANCE}", "berth.kind=deps"]}
            )
        )
        for volume in deps:
            owner = (volume.attrs.get("Labels") or {}).get("berth.owner", "")
            keep = await db(
                lambda v=volume.name, o=owner: (
                    DepCache.objects.filter(volume=v).exists()
                    or Run.objects.filter(public_id=o, state__in=ACTIVE_STATES).exists()
                )
            )()
            if keep:
                continue
            quiet = volume.name in self.refused
            if await asyncio.to_thread(caches.remove_volume, volume.name, quiet):
                self.refused.discard(volume.name)
            else:
                self.refused.add(volume.name)


def lost_runs(carried: set[str]) -> list[int]:
    """Ends the running runs no started container carries; returns the ids of admitted
    runs no worker carried on within STALE_PREPARING of their last send or start (the
    message may be lost: a worker killed mid-task, a broker restarted without its
    data), to be sent again (idempotent: the run finds the sandboxes it made)."""
    now = timezone.now()
    stale = []
    # This host's runs alone: `carried` names this engine's containers, so another
    # host's running runs would all look lost here.
    mine = Run.objects.filter(state__in=ACTIVE_STATES, runner_host=this_host())
    for run in mine.exclude(public_id__in=carried):
        if (
            run.state == RunState.RUNNING
            and run.process_started_at
            and now - run.process_started_at > RUNNING_GRACE
        ):
            state, message = describe("worker_lost")
            if run.finish(state, "worker_lost", message):
                remove_run(run)
        elif (
            run.state in (RunState.QUEUED, RunState.PREPARING)
            and run.admitted_at
            and now - max(t for t in (run.admitted_at, run.started_at, run.prepare_sent_at) if t)
            > STALE_PREPARING
            # A delivery preparing it renews its lease (runs.lease): not lost, only slow.
            and not (run.prepare_lease_until and run.prepare_lease_until > now)
        ):
            # Its env values wait sealed on the run, so a lost message costs nothing.
            stale.append(run.pk)
    # A safety net: an end whose admission step never ran (its process died).
    quotas.admit()
    return stale
