"""The engine loop: carries every live sandbox of this host to its end (docs/architecture.md).

It reads and writes Sandbox rows alone, and tells their owners through the handlers
they register (sandbox.owners):
1. learns of starts and exits from Docker events; a start is told to the owner (who
   follows the output) and gets the egress proxy its network asks for;
2. every tick, stops sandboxes past their deadline and those whose stop was asked
   for (SIGTERM, then SIGKILL after the grace period); off the tick, samples CPU
   time and counts disk use (sandbox.diskwatch), killing one past its caps at once;
3. on exit, records the exit on the row, lets the owner write its end, then removes
   the container and its volume;
4. at start and every RECONCILE_EVERY_S seconds, reconciles rows and containers both
   ways: a container without a live row is removed, a live row whose container is
   gone is marked removed, and a live row whose owner is gone (a `created` one too)
   is removed with its container and volume.
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
from django.db.models import Q
from django.utils import timezone

from sandbox import backend
from sandbox.diskwatch import ROUND_S, DiskWatch
from sandbox.egress.service import Egress
from sandbox.engine import engine
from sandbox.models import LIVE_STATES, Sandbox, SandboxState, this_host
from sandbox.ooms import OomEvents
from sandbox.owners import owner_of, registered_kinds

log = logging.getLogger("berth.runner_agent")

RECONCILE_EVERY_S = settings.RUN_RECONCILE_EVERY_S
EXIT_SIGKILL = 137
TICK_S = 0.5
# CPU growth smaller than this waits for the next sample to be recorded: an idle
# sandbox's few milliseconds a second cost four writes each otherwise. What a sandbox
# used after its last recorded sample goes with its cgroup: now up to this much more.
CPU_RECORD_MIN_S = 0.02


class Listed(NamedTuple):
    name: str
    labels: dict[str, str]
    status: str  # created, running, exited, dead, ...


def _instance_filter() -> dict[str, Any]:
    return {"label": [f"berth.instance={settings.BERTH_INSTANCE}"]}


# The kinds of container the loop carries: a sandbox's, and a run's as the release
# before the Sandbox row named it (adopted by name). Anything else this instance made
# (a test's, an image build's) is not the loop's to remove.
CARRIED_KINDS = ("sandbox", "run")


def listed() -> list[Listed]:
    """This instance's sandbox containers, from the engine's list alone: the SDK's
    list inspects each one after, and fails when a container goes between the two."""
    found = [
        Listed(c["Names"][0].lstrip("/"), c.get("Labels") or {}, c.get("State", ""))
        for c in engine().api.containers(all=True, filters=_instance_filter())
    ]
    return [c for c in found if c.labels.get("berth.kind") in CARRIED_KINDS]


def db(fn: Any) -> Any:
    """Run ORM code on a worker thread and close stale connections after it."""

    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        finally:
            close_old_connections()

    return sync_to_async(call, thread_sensitive=True)


def on_thread(fn: Any) -> Any:
    """Like `db`, but on a thread of its own: for work that also waits on the engine,
    which must not hold up every other sandbox's ORM calls."""

    async def call(*args: Any, **kwargs: Any) -> Any:
        def body() -> Any:
            try:
                return fn(*args, **kwargs)
            finally:
                close_old_connections()

        return await asyncio.to_thread(body)

    return call


def _row(name: str) -> Sandbox | None:
    return Sandbox.objects.filter(name=name).first()


class EngineLoop:
    def __init__(self) -> None:
        self.finalizing: set[str] = set()  # by container name
        self.known: dict[str, Sandbox] = {}  # live rows by container name, from their start
        self.loop: asyncio.AbstractEventLoop | None = None
        self.background: set[asyncio.Task[None]] = set()
        self.egress = Egress(db)
        self.disk = DiskWatch(db)
        # Set when a container starts: its owner may want to look at it at once.
        self.started_event = asyncio.Event()
        self.ooms = OomEvents()  # containers the engine reported an OOM kill in
        # Set when the engine pauses or unpauses one: a session waits on it.
        self.paused_event = asyncio.Event()

    def spawn(self, coro: Any) -> None:
        """A fire-and-forget task, kept referenced until done (asyncio holds weak refs)."""
        task = asyncio.create_task(coro)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    def jobs(self, stop: asyncio.Event) -> list[asyncio.Task[None]]:
        """The loop's own periodic work, once the event reader runs."""
        assert self.loop is not None
        return [
            asyncio.create_task(self.every(TICK_S, self.tick, stop)),
            asyncio.create_task(self.every(RECONCILE_EVERY_S, self.reconcile, stop)),
            # Its own job: a slow count never delays the tick's timeouts.
            asyncio.create_task(self.every(ROUND_S, self.disk.round, stop)),
            asyncio.create_task(self.every(settings.RUN_CPU_SAMPLE_S, self.sample_cpu, stop)),
        ]

    def start_events(self, stop: asyncio.Event) -> asyncio.Task[None]:
        self.loop = asyncio.get_running_loop()
        events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        threading.Thread(
            target=self._watch_events, args=(events, stop), daemon=True, name="docker-events"
        ).start()
        return asyncio.create_task(self._consume(events))

    async def every(
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
            await self.safely(job)

    async def safely(self, job: Any) -> None:
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
        filters = {
            "type": "container",
            **_instance_filter(),
            "event": ["start", "oom", "die", "pause", "unpause"],
        }
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
            name = attrs.get("name") if attrs.get("berth.kind") in CARRIED_KINDS else None
            container_id = str(event.get("id") or (event.get("Actor") or {}).get("ID") or "")
            try:
                if status == "reconcile":
                    await self.reconcile()
                elif status == "oom" and name:
                    self.ooms.saw(container_id)  # before its die, or just after (sandbox.ooms)
                elif status in ("pause", "unpause") and name:
                    await self.paused(name, status == "pause")
                elif status in ("start", "die") and name:
                    # Its row as seen at its start (a die follows it), else asked for.
                    sandbox = self.known.get(name) or await db(_row)(name)
                    if sandbox is None or not sandbox.is_live:
                        continue  # not ours to carry: the reconcile removes it
                    if status == "start":
                        self.started_event.set()
                        await self.started(sandbox)
                    else:
                        self.spawn(self.safely(lambda s=sandbox: self.egress.withdraw(s)))
                        facts = self._facts_of_die(container_id, attrs)
                        self.spawn(
                            self.safely(
                                lambda s=sandbox, f=facts, c=container_id: self.finalize(s, f, c)
                            )
                        )
            except Exception:
                log.exception("handling %s of %s failed", status, name)

    async def started(self, sandbox: Sandbox) -> None:
        self.known[sandbox.name] = sandbox
        # First: the sandbox's command waits for its egress proxy.
        self.spawn(self.safely(lambda: self.egress.offer(sandbox)))
        owner = owner_of(sandbox)
        if owner is not None:
            await owner.started(sandbox)  # its output followed from the first line
        # A row already running is one each reconcile finds again (every live sandbox,
        # every RECONCILE_EVERY_S): a thread hop and an update that changes nothing.
        if sandbox.state != SandboxState.RUNNING:
            await db(sandbox.mark_running)()

    async def paused(self, name: str, paused: bool) -> None:
        """A pause or unpause as the engine reported it, on the row (a frozen session is
        frozen only once the engine says so, and thawed whenever it does)."""
        sandbox = self.known.get(name) or await db(_row)(name)
        if sandbox is not None and sandbox.is_live:
            await db(sandbox.mark_paused)(paused)
            self.paused_event.set()

    def _facts_of_die(self, container_id: str, attrs: dict[str, str]) -> dict[str, Any] | None:
        """The exit as the die event tells it, or None to ask the engine. An exit by
        SIGKILL (137) is always asked about: it may be an OOM kill whose oom event this
        agent did not see (it restarted in between) or has yet to see (sandbox.ooms)."""
        code = attrs.get("exitCode", "")
        if not code.isdigit() or int(code) == EXIT_SIGKILL:
            return None
        oom = self.ooms.take(container_id)
        return {"running": False, "exit_code": int(code), "oom_killed": oom, "status": "exited"}

    async def finalize(
        self, sandbox: Sandbox, facts: dict[str, Any] | None = None, died: str = ""
    ) -> None:
        """After an exit: the exit on the row, the owner's end, then the sandbox goes.
        `facts`: the exit code and OOM flag as the die event told them; else the
        engine is asked (one call less per run, when it is busiest with the exit).
        `died`: the container id its die event named, whose oom event may come late."""
        if sandbox.name in self.finalizing:
            return
        self.finalizing.add(sandbox.name)
        try:
            if facts is None:
                facts = await asyncio.to_thread(backend.finalize_facts, sandbox.name)
            if facts is not None and facts.get("running"):
                return  # restarted meanwhile: not an exit
            # Found exited by a reconcile before its die event was handled: its oom
            # event may be late all the same.
            died = died or str((facts or {}).get("id") or "")
            # As it is now: a stop asked for while it ran says why it ended.
            await db(sandbox.refresh_from_db)()
            if facts is not None and died and facts.get("exit_code") == EXIT_SIGKILL:
                # The kernel's kill, unless a stop asked for it: its oom event may
                # follow its die (sandbox.ooms).
                facts["oom_killed"] = bool(facts.get("oom_killed")) or (
                    self.ooms.take(died) if sandbox.stop_reason else await self.ooms.late(died)
                )
            if facts is not None:
                await db(sandbox.mark_exited)(facts.get("exit_code"), facts.get("oom_killed"))
            owner = owner_of(sandbox)
            if owner is not None:
                await owner.exited(sandbox, facts, self.disk.note_for(sandbox.public_id))
            await db(sandbox.refresh_from_db)()
            if sandbox.state != SandboxState.REMOVED:
                await on_thread(_remove)(sandbox)
        finally:
            self.finalizing.discard(sandbox.name)
            self.known.pop(sandbox.name, None)
            if died:
                self.ooms.take(died)

    # -- deadlines, stops, CPU -------------------------------------------------------

    async def tick(self) -> None:
        now = timezone.now()
        # Only those with something to do: a stop asked for or a deadline passed (the
        # rest, most of them at rest, are never loaded twice a second).
        running = await db(
            lambda: list(
                # This host's alone: another's are stopped by their own agent (marked
                # signalled here, they would get no SIGTERM there, only the SIGKILL).
                Sandbox.objects.filter(host=this_host(), state=SandboxState.RUNNING).filter(
                    ~Q(stop_reason="") | Q(deadline__lt=now)
                )
            )
        )()
        for sandbox in running:
            try:
                await self._tick_one(sandbox, now)
            except (docker.errors.DockerException, OSError):
                raise  # the engine: `safely` says so once, and the next tick retries
            except Exception:
                # One sandbox's fault never keeps the others' deadlines from applying.
                log.exception("checking sandbox %s failed", sandbox.public_id)

    async def _tick_one(self, sandbox: Sandbox, now: datetime) -> None:
        if not sandbox.stop_reason and sandbox.deadline and now > sandbox.deadline:
            await db(sandbox.request_stop)("timeout")
        if sandbox.stop_reason and sandbox.paused:
            # A frozen container takes no signal: thawed first, then stopped.
            await asyncio.to_thread(backend.pause_sandbox, sandbox.name, False)
        if sandbox.stop_reason and sandbox.stop_signalled_at is None:
            await asyncio.to_thread(backend.signal_sandbox, sandbox.name, "SIGTERM")
            await db(sandbox.mark_signalled)()
        elif sandbox.stop_signalled_at and now > sandbox.stop_signalled_at + timedelta(
            seconds=settings.RUN_STOP_GRACE_S
        ):
            await asyncio.to_thread(backend.signal_sandbox, sandbox.name, "SIGKILL")

    async def sample_cpu(self) -> None:
        """Each running sandbox's CPU time, for its owner's budget; its own job, so a
        slow engine answer never holds up deadlines and stops."""
        running = await db(
            lambda: list(Sandbox.objects.filter(host=this_host(), state=SandboxState.RUNNING))
        )()
        if not running:
            return
        # One thread hop for them all: each is a file read (sandbox.containers).
        samples = await asyncio.to_thread(lambda: [(s, _cpu_or_none(s.name)) for s in running])
        grown = [
            (s, used)
            for s, used in samples
            if used is not None and used >= s.cpu_seconds + CPU_RECORD_MIN_S
        ]
        if grown:
            await db(_record_cpu)(grown)

    # -- reconcile -----------------------------------------------------------------

    async def _paused_as_now(self, sandbox: Sandbox) -> None:
        """The row's pause as the engine says it now. The list the reconcile reads
        comes before the rows: a pause between the two (its event already marked the
        row) would otherwise be undone from the stale list, and a frozen session taken
        for thawed, ready with its container paused. A move after this asking sends
        its own event, handled after."""
        status = await asyncio.to_thread(backend.status_now, sandbox.name)
        if status in ("running", "paused") and sandbox.paused != (status == "paused"):
            await db(sandbox.mark_paused)(status == "paused")
            self.paused_event.set()

    async def reconcile(self) -> None:
        """Every kind of orphan: a live row whose owner is gone is removed with its
        container and volume (first: the container may hold volumes the owners' sweeps
        remove after); a container without a live row is removed; a live row whose
        container is gone is marked removed. Owners hear which of theirs have a started
        container."""
        containers = await asyncio.to_thread(listed)
        names = [c.name for c in containers]
        rows = await db(
            lambda: {
                s.name: s
                for s in Sandbox.objects.filter(name__in=names)
                | Sandbox.objects.filter(host=this_host(), state__in=LIVE_STATES)
            }
        )()
        for sandbox in await db(_orphaned)(list(rows.values())):
            if sandbox.name in self.finalizing:
                continue
            # Forgotten first: the die event of its removal finds the row removed.
            self.known.pop(sandbox.name, None)
            await on_thread(_remove)(sandbox)
            log.info(
                "sandbox %s removed: its %s %s is gone",
                sandbox.public_id,
                sandbox.owner_kind,
                sandbox.owner_id,
            )
        carried: dict[str, set[str]] = {}
        for container in containers:
            sandbox = rows.get(container.name)
            if sandbox is None or not sandbox.is_live:
                if container.name not in self.finalizing:
                    await asyncio.to_thread(backend.remove_sandbox, container.name)
                continue
            if container.status != "created":
                carried.setdefault(sandbox.owner_kind, set()).add(sandbox.owner_id)
            if container.status in ("running", "paused"):
                # After an agent restart: the old follower and proxy died with the agent.
                # A paused container is live (a frozen session): its log and egress too.
                if sandbox.paused != (container.status == "paused"):
                    await self._paused_as_now(sandbox)
                await self.started(sandbox)
            elif container.status in ("exited", "dead"):
                self.spawn(self.safely(lambda s=sandbox: self.finalize(s)))
        there = set(names)
        for sandbox in rows.values():
            gone = sandbox.name not in there and sandbox.name not in self.finalizing
            if gone and sandbox.state in (SandboxState.RUNNING, SandboxState.EXITED):
                await db(sandbox.mark_removed)()
                self.known.pop(sandbox.name, None)
        await self._reconcile_stray_volumes(there)
        for kind, owner in registered_kinds().items():
            await owner.reconciled(carried.get(kind, set()))

    async def _reconcile_stray_volumes(self, containers: set[str]) -> None:
        """/workspace volumes (named after their sandbox) of no live sandbox."""
        volumes = await asyncio.to_thread(lambda: engine().volumes.list(filters=_instance_filter()))
        names = [
            v.name
            for v in volumes
            if (v.attrs.get("Labels") or {}).get("berth.kind") in CARRIED_KINDS
            and v.name not in containers
        ]
        live = await db(
            lambda: set(
                Sandbox.objects.filter(name__in=names, state__in=LIVE_STATES).values_list(
                    "name", flat=True
                )
            )
        )()
        for name in set(names) - live:
            await asyncio.to_thread(backend.remove_sandbox, name)


def _cpu_or_none(name: str) -> float | None:
    try:
        return backend.cpu_seconds(name)
    except (docker.errors.DockerException, OSError):
        return None  # asked again at the next sample


def _record_cpu(grown: list[tuple[Sandbox, float]]) -> None:
    for sandbox, used in grown:
        try:
            grew = used - sandbox.cpu_seconds
            sandbox.record_cpu(used)
            owner = owner_of(sandbox)
            if owner is not None:
                owner.cpu_used(sandbox, grew)
        except Exception:
            # One sandbox's fault never keeps the others' CPU from being counted.
            log.exception("recording the CPU of sandbox %s failed", sandbox.public_id)


def _orphaned(rows: list[Sandbox]) -> list[Sandbox]:
    """The live rows whose owner is gone (deleted with its workspace, say), a `created`
    one included: no owner will ever start, end or remove it, so the reconcile does. A
    kind no owner registered for is left alone (not this process's to judge)."""
    owners = registered_kinds()
    wanted: dict[str, set[str]] = {}
    for sandbox in rows:
        if sandbox.is_live and sandbox.owner_kind in owners:
            wanted.setdefault(sandbox.owner_kind, set()).add(sandbox.owner_id)
    present = {kind: owners[kind].present(ids) for kind, ids in wanted.items()}
    return [
        s
        for s in rows
        if s.owner_kind in present and s.is_live and s.owner_id not in present[s.owner_kind]
    ]


def _remove(sandbox: Sandbox) -> None:
    backend.remove_sandbox(sandbox.name)
    sandbox.mark_removed()
