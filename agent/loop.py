"""The runner agent: one long-lived asyncio process per Docker host (docs/architecture.md).

It carries every live run container of this instance to its end:
1. learns of starts and exits from Docker events, and follows each container's
   output into the log store (runs.follow), resuming after its own restart;
2. every tick, stops runs past their wall-clock timeout and cancelled ones (SIGTERM,
   then SIGKILL after the grace period), and health-checks previews and stops idle
   ones (previews.watch); off the tick, counts each sandbox's disk bytes and inodes
   and kills one past its caps at once (sandbox.diskwatch);
3. on exit, waits for the log to be complete, writes the one terminal state and
   removes the container and its volume;
4. at start and every RECONCILE_EVERY_S seconds, reconciles orphans both ways.
"""

import asyncio
import contextlib
import logging
import threading
from datetime import datetime, timedelta
from typing import Any, NamedTuple

import docker
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from deploys.releasing import restore_all
from previews.watch import Watcher
from runs import caches, ending, quotas, tasks
from runs.follow import Follower
from runs.models import ACTIVE_STATES, DepCache, Run, RunState, TeamCpuDay
from runs.outcomes import describe
from sandbox import backend
from sandbox.diskwatch import ROUND_S, DiskWatch
from sandbox.egress.service import Egress
from sandbox.engine import engine

log = logging.getLogger("berth.runner_agent")

RECONCILE_EVERY_S = settings.RUN_RECONCILE_EVERY_S
EXIT_SIGKILL = 137
TICK_S = 0.5
# A queued run no worker has picked up by then is sent again (the task is idempotent).
STALE_PREPARING = timedelta(seconds=settings.RUN_STALE_QUEUED_S)
# How often runs whose prepare task never reached the broker (it was down) are looked
# for: they go as soon as it answers again, not a whole reconcile later.
UNDELIVERED_EVERY_S = 2.0
RUNNING_GRACE = timedelta(seconds=15)  # a just-started run may not be listed yet


def _label_filters(kind: str = "run") -> list[str]:
    return [f"berth.instance={settings.BERTH_INSTANCE}", f"berth.kind={kind}"]


class Listed(NamedTuple):
    name: str
    labels: dict[str, str]
    status: str  # created, running, exited, dead, ...


def _listed() -> list[Listed]:
    """This instance's run containers, from the engine's list alone: the SDK's list
    inspects each one after, and fails when a container goes between the two."""
    return [
        Listed(c["Names"][0].lstrip("/"), c.get("Labels") or {}, c.get("State", ""))
        for c in engine().api.containers(all=True, filters={"label": _label_filters()})
    ]


def _db(fn: Any) -> Any:
    """Run ORM code on a worker thread and close stale connections after it."""

    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        finally:
            close_old_connections()

    return sync_to_async(call, thread_sensitive=True)


def _thread(fn: Any) -> Any:
    """Like _db, but on a thread of its own: for work that also waits on the engine
    (reading a run's files back), which must not hold up every other run's ORM calls."""

    async def call(*args: Any, **kwargs: Any) -> Any:
        def body() -> Any:
            try:
                return fn(*args, **kwargs)
            finally:
                close_old_connections()

        return await asyncio.to_thread(body)

    return call


class Agent:
    def __init__(self) -> None:
        # Both keyed by container name: a run with a [setup] step has two containers,
        # one after the other, whose output goes into the one log of the run.
        self.followers: dict[str, Follower] = {}
        self.finalizing: set[str] = set()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.background: set[asyncio.Task[None]] = set()
        self.egress = Egress(_db)
        self.disk = DiskWatch(_db)
        # Set when a container starts: a preview's server may be starting, and its
        # first health probe should not wait for the watcher's next round.
        self.previews_due = asyncio.Event()
        self.oom_seen: set[str] = set()  # containers the engine reported an OOM kill in

    def _spawn(self, coro: Any) -> None:
        """A fire-and-forget task, kept referenced until done (asyncio holds weak refs)."""
        task = asyncio.create_task(coro)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    # -- the main loop -------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        self.loop = asyncio.get_running_loop()
        events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        threading.Thread(
            target=self._watch_events, args=(events, stop), daemon=True, name="docker-events"
        ).start()
        log.info("runner agent started (instance %s)", settings.BERTH_INSTANCE)
        await self._safely(self.reconcile)
        watcher = Watcher()
        tasks = [
            asyncio.create_task(self._consume(events)),
            asyncio.create_task(self._every(TICK_S, self.tick, stop)),
            asyncio.create_task(self._every(watcher.TICK_S, watcher.tick, stop, self.previews_due)),
            asyncio.create_task(self._every(RECONCILE_EVERY_S, self.reconcile, stop)),
            asyncio.create_task(self._every(UNDELIVERED_EVERY_S, self.send_undelivered, stop)),
            # Its own job: a slow count never delays the tick's timeouts.
            asyncio.create_task(self._every(ROUND_S, self.disk.round, stop)),
            asyncio.create_task(self._every(settings.RUN_CPU_SAMPLE_S, self.sample_cpu, stop)),
        ]
        await stop.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.egress.close()

    async def _every(
        self, seconds: float, job: Any, stop: asyncio.Event, woken: asyncio.Event | None = None
    ) -> None:
        """`job` every `seconds`, or at once when `woken` is set."""
        while not stop.is_set():
            if woken is None:
                await asyncio.sleep(seconds)
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), seconds)
                woken.clear()
            await self._safely(job)

    async def _safely(self, job: Any) -> None:
        try:
            await job()
        except (docker.errors.DockerException, OSError) as e:
            log.warning("engine unavailable, will retry: %s", e)
        except Exception:
            log.exception("%s failed", getattr(job, "__name__", job))

    def _watch_events(self, queue: asyncio.Queue[dict[str, Any]], stop: asyncio.Event) -> None:
        """Blocking reader of Docker events, on its own thread; reconnects with backoff
        (and asks for a reconcile, since events may have been missed meanwhile)."""
        assert self.loop is not None
        filters = {"type": "container", "label": _label_filters(), "event": ["start", "oom", "die"]}
        delay = 0.5
        while not stop.is_set():
            try:
                for event in engine().events(decode=True, filters=filters):
                    self.loop.call_soon_threadsafe(queue.put_nowait, event)
                    delay = 0.5
            except Exception as e:  # any failure of the stream: reconnect
                log.warning("docker events stream broke: %s", e)
            self.loop.call_soon_threadsafe(queue.put_nowait, {"status": "reconcile"})
            stop_wait = threading.Event()
            stop_wait.wait(delay)
            delay = min(delay * 2, 10)

    async def _consume(self, queue: asyncio.Queue[dict[str, Any]]) -> None:
        while True:
            event = await queue.get()
            status = event.get("status") or event.get("Action")
            attrs = (event.get("Actor") or {}).get("Attributes") or {}
            owner, name = attrs.get("berth.owner"), attrs.get("name")
            phase = attrs.get("berth.phase", "main")
            try:
                if status == "reconcile":
                    await self.reconcile()
                elif status == "start" and owner and name:
                    self.previews_due.set()
                    # First: the sandbox's command waits for its egress proxy.
                    self._spawn(
                        self._safely(lambda o=owner, n=name, p=phase: self.egress.offer(o, n, p))
                    )
                    self.follow(owner, name)
                elif status == "oom" and name:
                    self.oom_seen.add(name)  # sent before the container's die, if at all
                elif status == "die" and owner and name:
                    self._spawn(self._safely(lambda o=owner, n=name: self.egress.withdraw(o, n)))
                    self.follow(owner, name)  # drain what the engine kept, if not yet
                    facts = self._facts_of_die(name, attrs)
                    self._spawn(
                        self._safely(
                            lambda o=owner, n=name, p=phase, f=facts: self.finalize(o, n, p, f)
                        )
                    )
            except Exception:
                log.exception("handling %s of %s failed", status, name)

    # -- following and ending ------------------------------------------------------

    def follow(self, run_id: str, container: str) -> None:
        current = self.followers.get(container)
        if current is not None and (current.is_alive() or container in self.finalizing):
            return
        assert self.loop is not None
        follower = Follower(run_id, container, self.loop)
        self.followers[container] = follower
        follower.start()

    def _facts_of_die(self, name: str, attrs: dict[str, str]) -> dict[str, Any] | None:
        """The exit as the die event tells it, or None to ask the engine. An exit by
        SIGKILL (137) is always asked about: it may be an OOM kill whose oom event this
        agent did not see (it restarted in between)."""
        oom = name in self.oom_seen
        self.oom_seen.discard(name)
        code = attrs.get("exitCode", "")
        if not code.isdigit() or int(code) == EXIT_SIGKILL:
            return None
        return {"running": False, "exit_code": int(code), "oom_killed": oom, "status": "exited"}

    async def finalize(
        self, run_id: str, container: str, phase: str = "main", facts: dict[str, Any] | None = None
    ) -> None:
        """After an exit: wait for the whole log, then either go on to the command
        (a setup step that succeeded) or write the end and remove the sandbox.
        `facts`: the exit code and OOM flag as the die event told them; else the
        engine is asked (one call less per run, when it is busiest with the exit)."""
        if container in self.finalizing:
            return
        self.finalizing.add(container)
        outputs: asyncio.Future[Any] | None = None
        try:
            # A run's files are final once its container died: they are read back while
            # the exit is looked at and the log drains (a container found gone ends
            # worker_lost, and what was read goes unused).
            if phase != "setup":
                outputs = asyncio.ensure_future(_thread(ending.early_outputs)(run_id))
            if facts is None:
                facts = await asyncio.to_thread(backend.finalize_facts, container)
            if facts is not None and facts.get("running"):
                return  # restarted meanwhile: not an exit
            follower = self.followers.get(container)
            if follower is not None:
                # The end is written only once the whole log is stored, however long a
                # flood takes to drain: a run's log is complete when the run is.
                await asyncio.to_thread(follower.done.wait)
            # What the disk watch saw goes into the log (the follower, its one writer,
            # is done) by the end, which alone knows whether the watch stopped it.
            note = self.disk.note_for
            if phase == "setup" and await _thread(ending.end_setup)(run_id, facts, note):
                await asyncio.to_thread(backend.remove_sandbox, container)
            else:
                if phase != "setup":
                    await _thread(ending.end_run)(
                        run_id,
                        facts,
                        follower.bytes if follower else None,
                        outputs=await outputs if outputs is not None else None,
                        disk_note=note,
                    )
                run = await _db(lambda: Run.objects.filter(public_id=run_id).first())()
                if run is not None:
                    await _thread(backend.remove_run)(run)
            self.followers.pop(container, None)
        finally:
            if outputs is not None:
                # Never left running past this finalize (a later one would read the
                # same files at the same time), its error never left unretrieved.
                await asyncio.gather(outputs, return_exceptions=True)
            self.finalizing.discard(container)

    # -- limits, cancels, disk -----------------------------------------------------

    async def tick(self) -> None:
        now = timezone.now()
        running = await _db(lambda: list(Run.objects.filter(state=RunState.RUNNING)))()
        for run in running:
            try:
                await self._tick_run(run, now)
            except (docker.errors.DockerException, OSError):
                raise  # the engine: _safely says so once, and the next tick retries
            except Exception:
                # One run's fault never keeps the others' timeouts and stops from applying.
                log.exception("checking run %s failed", run.public_id)

    async def _tick_run(self, run: Run, now: datetime) -> None:
        # The wall clock covers setup and command alike, from the first start.
        clock = run.hydrated_at or run.process_started_at
        target = run.setup_container_name if run.phase == "setup" else run.container_name
        # A service (a preview's server) runs until stopped: its owner ends it.
        if (
            not run.stop_reason
            and clock
            and not run.is_service
            and now > clock + timedelta(seconds=run.timeout_s)
        ):
            await _db(self._request_stop)(run, "timeout")
        if run.stop_reason and run.stop_signalled_at is None:
            await asyncio.to_thread(backend.signal_sandbox, target, "SIGTERM")
            await _db(
                lambda r=run: Run.objects.filter(pk=r.pk).update(stop_signalled_at=timezone.now())
            )()
        elif run.stop_signalled_at and now > run.stop_signalled_at + timedelta(
            seconds=settings.RUN_STOP_GRACE_S
        ):
            await asyncio.to_thread(backend.signal_sandbox, target, "SIGKILL")

    async def sample_cpu(self) -> None:
        """The team's CPU budget counts what each container used (runs.quotas); its
        own job, so a slow engine answer never holds up timeouts and stops."""
        running = await _db(
            lambda: list(Run.objects.filter(state=RunState.RUNNING).select_related("workspace"))
        )()
        await asyncio.gather(*(self._sample_cpu(run) for run in running), return_exceptions=True)

    async def _sample_cpu(self, run: Run) -> None:
        phase = run.phase or "main"
        target = run.setup_container_name if phase == "setup" else run.container_name
        used = await asyncio.to_thread(backend.cpu_seconds, target)
        if used is None or used <= run.cpu_by_phase.get(phase, 0):
            return
        grew = used - run.cpu_by_phase.get(phase, 0)
        by_phase = {**run.cpu_by_phase, phase: round(used, 3)}

        def record() -> None:
            Run.objects.filter(pk=run.pk).update(
                cpu_by_phase=by_phase, cpu_seconds=round(sum(by_phase.values()), 3)
            )
            TeamCpuDay.add(run.workspace.team_id, grew)

        await _db(record)()

    def _request_stop(self, run: Run, reason: str) -> None:
        Run.objects.filter(pk=run.pk, stop_reason="").update(stop_reason=reason)
        run.refresh_from_db()

    # -- reconcile -----------------------------------------------------------------

    async def send_undelivered(self) -> None:
        """Runs accepted while the broker was down: their prepare task, now. Sent on a
        thread of its own: a broker that is still down makes each try wait a moment,
        which must not hold up the other runs' ORM calls."""
        run_ids = await _db(tasks.undelivered_runs)()
        if run_ids:
            await _thread(tasks.send_again)(run_ids, "the broker had not received them")

    async def reconcile(self) -> None:
        """Both kinds of orphans: an active run without a container is lost; a
        container whose run is finished or unknown is removed."""
        containers = await asyncio.to_thread(_listed)
        by_owner: dict[str, list[Listed]] = {}
        for c in containers:
            by_owner.setdefault(c.labels.get("berth.owner", ""), []).append(c)
        runs = await _db(
            lambda: {r.public_id: r for r in Run.objects.filter(public_id__in=list(by_owner))}
        )()
        for owner, group in by_owner.items():
            run = runs.get(owner)
            for container in group:
                if run is None or not run.is_active:
                    if container.name not in self.finalizing:
                        await asyncio.to_thread(backend.remove_sandbox, container.name)
                elif container.status == "running":
                    self.follow(owner, container.name)
                    # After an agent restart: the old listener died with the old agent.
                    phase = container.labels.get("berth.phase", "main")
                    self._spawn(
                        self._safely(
                            lambda o=owner, n=container.name, p=phase: self.egress.offer(o, n, p)
                        )
                    )
                elif container.status in ("exited", "dead"):
                    self.follow(owner, container.name)
                    phase = container.labels.get("berth.phase", "main")
                    self._spawn(
                        self._safely(
                            lambda o=owner, n=container.name, p=phase: self.finalize(o, n, p)
                        )
                    )
        # A container never started does not carry its run: the worker that made it died
        # before starting it, and the run is sent again once stale (which replaces it).
        started = {
            owner for owner, group in by_owner.items() if any(c.status != "created" for c in group)
        }
        stale = await _db(self._lost_runs)(started)
        if stale:
            await _thread(tasks.send_again)(
                stale, f"no worker carried them on within {STALE_PREPARING.seconds} s"
            )
        await self._reconcile_stray_volumes()
        await _db(restore_all)()

    def _lost_runs(self, with_container: set[str]) -> list[int]:
        """Ends the runs whose container is gone; returns the ids of admitted runs no
        worker carried on within STALE_PREPARING of their last send or start (the
        message may be lost: a worker killed mid-task, a broker restarted without its
        data), to be sent again (idempotent: the container name is unique)."""
        now = timezone.now()
        stale = []
        for run in Run.objects.filter(state__in=ACTIVE_STATES).exclude(
            public_id__in=with_container
        ):
            if (
                run.state == RunState.RUNNING
                and run.process_started_at
                and now - run.process_started_at > RUNNING_GRACE
            ):
                state, message = describe("worker_lost")
                run.finish(state, "worker_lost", message)
            elif (
                run.state in (RunState.QUEUED, RunState.PREPARING)
                and run.admitted_at
                and now
                - max(t for t in (run.admitted_at, run.started_at, run.prepare_sent_at) if t)
                > STALE_PREPARING
            ):
                # Its env values wait sealed on the run, so a lost message costs nothing.
                stale.append(run.pk)
        # A safety net: an end whose admission step never ran (its process died).
        quotas.admit()
        return stale

    async def _reconcile_stray_volumes(self) -> None:
        volumes = await asyncio.to_thread(
            lambda: engine().volumes.list(filters={"label": _label_filters()})
        )
        owners = {v.name: (v.attrs.get("Labels") or {}).get("berth.owner") for v in volumes}
        containers = {c.name for c in await asyncio.to_thread(_listed)}
        for name in set(owners) - containers:
            # By label: a setup step's /workspace is named after its container ("-setup").
            owner = owners[name] or name.rsplit("-", 1)[-1]
            active = await _db(
                lambda o=owner: Run.objects.filter(public_id=o, state__in=ACTIVE_STATES).exists()
            )()
            if not active:
                await asyncio.to_thread(backend.remove_sandbox, name)
        # /deps volumes a setup step filled that did not become a cache (it failed, or
        # a concurrent run of the same key won) and whose run has ended.
        deps = await asyncio.to_thread(
            lambda: engine().volumes.list(filters={"label": _label_filters("deps")})
        )
        for volume in deps:
            owner = (volume.attrs.get("Labels") or {}).get("berth.owner", "")
            keep = await _db(
                lambda v=volume.name, o=owner: (
                    DepCache.objects.filter(volume=v).exists()
                    or Run.objects.filter(public_id=o, state__in=ACTIVE_STATES).exists()
                )
            )()
            if not keep:
                await asyncio.to_thread(caches.remove_volume, volume.name)


def reconcile_once() -> None:
    asyncio.run(Agent().reconcile())
