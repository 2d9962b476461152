"""The runner agent's work for the sessions of its host (wired in agent.loop).

1. Execs (sessions.handoff): each queued exec is handed to its session's exec channel
   (a frozen session is thawed for it first, and every write on its branch is applied
   before it: an exec sees what was written before it was asked for); kills asked for
   are sent; after an agent restart, an exec the channel never heard of is ended `lost`
   (its output and end otherwise come from the container's log, which the session's
   follower resumes).
   Writes on a ready session's branch are applied as soon as they are announced
   (sessions.applier), and reads of its files are made when asked (sessions.reader,
   for the web host's sessions.snapshot).
2. Lifecycle, every tick and at each pause or unpause the engine reports: starting →
   ready once the channel answers; ready → freezing → frozen after `idle_freeze_s`
   without activity (frozen only once the engine says it is paused, and ready again
   whenever the engine says it is not); stopped after `idle_stop_s` without activity
   or at its maximum lifetime; a stopped session's files deleted after its retention.
3. Sweeps, every SWEEP_EVERY_S: deleted sessions' volumes a container still held (the
   reads' scratch stores are the web host's to sweep: sessions.tasks.sweep_reads).

Activity is an exec, a keep-alive, or a call that changes the session (the doors touch
it); an exec that is still running counts as activity for as long as it runs. Reading
a session's state is not: a watcher must not keep it from freezing.
"""

import asyncio
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import docker.errors
from django.conf import settings
from django.utils import timezone

from core import fanout
from runs.models import RunState
from sandbox import backend
from sandbox.engine import engine
from sandbox.loop import EngineLoop, db, on_thread
from sandbox.models import SandboxState
from sessions import applier, handoff, reader, snapshot
from sessions.channel import ChannelError, ChannelUnproven, ask, channel_of, hand_key
from sessions.clocks import to_step, waiting
from sessions.freeze import freeze
from sessions.lifecycle import agent_group, ask_stop, changed, expire
from sessions.models import (
    LIVE_STATES,
    RESTARTABLE_STATES,
    Exec,
    ExecState,
    Session,
    SessionState,
    SnapshotState,
    SyncState,
)
from sessions.outcomes import describe_exec, describe_session

log = logging.getLogger("berth.runner_agent")

TICK_S = 0.5
TOUCH_EVERY = timedelta(seconds=5)  # a running exec keeps its session active this often
SWEEP_EVERY_S = 10.0
# A receive the timeout cuts short costs the channel layer its Redis connection: one
# reconnect a second at rest, when this was 1 s (issue 32). Nothing needs it shorter:
# the job is cancelled at stop, and a lost signal costs the dispatch's tick.
LISTEN_S = 300.0
# Asked to pause this long ago and the engine never said so (the agent restarted between
# the two, or the engine thawed it at once): ready again, the next idle turn tries again.
FREEZING_FOR = timedelta(seconds=15)
SYSTEM = "Berth"
# The keeper's own moves, each from where it may start.
MOVES_FROM: dict[str, tuple[str, ...]] = {
    SessionState.READY: (SessionState.STARTING, SessionState.FREEZING, SessionState.FROZEN),
    SessionState.FREEZING: (SessionState.READY,),
    SessionState.FROZEN: (SessionState.FREEZING,),
}


def _here() -> dict[str, Any]:
    return {"run__sandbox__host": settings.SANDBOX_HOST}


def _queued() -> list[Exec]:
    return list(
        Exec.objects.filter(
            state=ExecState.QUEUED, session__run__sandbox__host=settings.SANDBOX_HOST
        ).select_related("session__run__sandbox", "session__workspace__team")
    )


def _kills() -> list[Exec]:
    return list(
        Exec.objects.filter(
            state=ExecState.RUNNING,
            kill_requested_at__isnull=False,
            session__run__sandbox__host=settings.SANDBOX_HOST,
        ).select_related("session__run__sandbox")
    )


def _sessions(states: tuple[str, ...]) -> list[Session]:
    return list(
        Session.objects.filter(state__in=states, **_here()).select_related(
            "run__sandbox", "workspace__team"
        )
    )


def _remove_volume(name: str) -> None:
    try:
        engine().api.remove_volume(name, force=True)
    except docker.errors.APIError as e:  # still held, or gone meanwhile: the next sweep
        log.info("session volume %s: %s", name, e)


def _to_sync() -> list[Session]:
    """Ready sessions of this host with a write to apply."""
    return list(
        Session.objects.filter(state=SessionState.READY, syncs__state=SyncState.PENDING, **_here())
        .distinct()
        .select_related("run__sandbox", "workspace__team")
    )


def _to_read() -> list[Session]:
    """Sessions of this host with a read of their files asked for (a frozen one thaws)."""
    return list(
        Session.objects.filter(
            state__in=(SessionState.READY, SessionState.FREEZING, SessionState.FROZEN),
            snapshots__state=SnapshotState.PENDING,
            **_here(),
        )
        .distinct()
        .select_related("run__sandbox", "workspace__team")
    )


def _busy(session: Session) -> bool:
    return Exec.objects.filter(
        session=session, state__in=(ExecState.QUEUED, ExecState.RUNNING)
    ).exists()


class Keeper:
    def __init__(self, engine_loop: EngineLoop) -> None:
        self.engine = engine_loop
        self.woken = asyncio.Event()
        self.locks: defaultdict[int, asyncio.Lock] = defaultdict(asyncio.Lock)
        self.in_flight: set[int] = set()  # exec pks being handed to a channel
        self.file_work: set[int] = set()  # session pks whose files are being synced or read
        self.reconciled = False
        self.began = timezone.now()  # execs marked running before it are checked once
        # Told before an exec with secrets runs (sessions.terminal_relay.mask_grants).
        self.on_grant: Callable[[Session], Awaitable[None]] | None = None
        self.stepping: set[int] = set()  # sessions whose step runs now
        self.sweep_now = asyncio.Event()  # a door deleted a session: its volume goes now

    def jobs(self, stop: asyncio.Event) -> list[asyncio.Task[None]]:
        every = self.engine.every
        return [
            asyncio.create_task(self.listen(stop)),
            asyncio.create_task(every(TICK_S, self.dispatch, stop, self.woken)),
            asyncio.create_task(every(TICK_S, self.step_all, stop, self.engine.paused_event)),
            asyncio.create_task(every(SWEEP_EVERY_S, self.sweep_volumes, stop, self.sweep_now)),
        ]

    async def listen(self, stop: asyncio.Event) -> None:
        """Woken by the doors' signal (a lost one costs a tick, never the work)."""
        while not stop.is_set():
            try:
                async with fanout.listening(agent_group(settings.SANDBOX_HOST)) as next_signal:
                    while not stop.is_set():
                        message = await next_signal(LISTEN_S)
                        if message is not None:
                            if message.get("sweep"):
                                self.sweep_now.set()
                            self.woken.set()
            except Exception as e:
                log.warning("sessions: listening for work failed, again in 1 s: %s", e)
                await asyncio.sleep(1)

    # -- execs ---------------------------------------------------------------------

    async def dispatch(self) -> None:
        execs, files, resumes_asked = await db(waiting)()  # at rest: one light hop
        for row in await db(_queued)() if execs else []:
            if row.pk not in self.in_flight:
                self.in_flight.add(row.pk)
                self.engine.spawn(self.engine.safely(lambda r=row: self._hand(r)))
        for row in await db(_kills)() if execs else []:
            self.engine.spawn(self.engine.safely(lambda r=row: handoff.kill(r)))
        for session in [*await db(_to_sync)(), *await db(_to_read)()] if files else []:
            if session.pk not in self.file_work:
                self.file_work.add(session.pk)
                self.engine.spawn(self.engine.safely(lambda s=session: self._files(s)))
        frozen = (
            await db(_sessions)((SessionState.FREEZING, SessionState.FROZEN))
            if resumes_asked
            else []
        )
        for session in [s for s in frozen if s.resume_requested_at]:
            async with self.locks[session.pk]:
                await self._thaw(session)

    async def _files(self, found: Session) -> None:
        """Its pending writes applied, then the reads of its files asked for made."""
        try:
            async with self.locks[found.pk]:
                session = await db(handoff.reload)(found.pk)
                if session.state in (SessionState.FREEZING, SessionState.FROZEN):
                    if not await db(snapshot.pending)(session):
                        return  # a write waits for the resume
                    await self._thaw(session)
                if session.state != SessionState.READY:
                    return
                await applier.apply_pending(session)
                await reader.take(session)
        except ChannelError as e:
            log.info("session %s: files not synced or read yet: %s", found.public_id, e)
        finally:
            self.file_work.discard(found.pk)

    async def _hand(self, row: Exec) -> None:
        """Handed under its session's lock (sessions.handoff); out of `in_flight` however
        that ends, so a later tick hands it again if it is still queued."""
        try:
            await handoff.hand(row, self.locks[row.session_id], self._thaw, self.on_grant)
        finally:
            self.in_flight.discard(row.pk)

    async def reconcile_execs(self) -> bool:
        """After a restart: an exec marked running that the channel never heard of
        (the agent died between the two) never ran, and ends `lost`. Only execs marked
        running before this agent began: one this agent hands out meanwhile is its
        own. True once each was checked; a session frozen, or whose channel did not
        answer, is asked again at a later step."""
        checked = True
        for session in await db(_sessions)(LIVE_STATES):
            running = await db(
                lambda s=session: list(
                    Exec.objects.filter(
                        session=s, state=ExecState.RUNNING, started_at__lt=self.began
                    )
                )
            )()
            if not running:
                continue
            sandbox = session.run.sandbox if session.run else None
            if session.state != SessionState.READY or sandbox is None:
                checked = False  # frozen, or stopping (whose end ends them)
                continue
            try:
                ns = await on_thread(channel_of)(sandbox)
                answer = await ask(ns, {"op": "status", "ids": [r.public_id for r in running]})
            except ChannelError:
                checked = False
                continue
            known = set(answer.get("running") or []) | set(answer.get("ended") or {})
            for row in running:
                if row.public_id not in known:
                    await db(handoff.end)(row, "lost", describe_exec("lost"))
        return checked

    # -- lifecycle -----------------------------------------------------------------

    async def step_all(self) -> None:
        if not self.reconciled:
            self.reconciled = await self.reconcile_execs()
        # A task per session whose step has something to do (sessions.clocks): one whose
        # channel stalls holds up no other session's clocks.
        for session in await db(to_step)():
            if session.pk not in self.stepping:
                self.stepping.add(session.pk)
                self.engine.spawn(self._step_one(session))

    async def _step_one(self, session: Session) -> None:
        try:
            async with self.locks[session.pk]:
                await self._step(session)
        except (ChannelError, OSError) as e:
            log.info("session %s: %s", session.public_id, e)
        except Exception:
            log.exception("session %s: its step failed", session.public_id)
        finally:
            self.stepping.discard(session.pk)

    async def sweep_volumes(self) -> None:
        """The volumes of deleted sessions that are still there (one that a container
        still held when its session was deleted): removed now that it is gone."""
        found = await asyncio.to_thread(
            lambda: engine().volumes.list(
                filters={
                    "label": [f"berth.instance={settings.BERTH_INSTANCE}", "berth.kind=session"]
                }
            )
        )
        names = {v.name for v in found}
        kept = await db(
            lambda: {
                s.volume
                for s in Session.objects.exclude(state=SessionState.DELETED).only("public_id")
            }
        )()
        for name in names - kept:
            await asyncio.to_thread(_remove_volume, name)

    async def _step(self, session: Session) -> None:
        now = timezone.now()
        run, sandbox = session.run, session.run.sandbox if session.run else None
        if session.state in RESTARTABLE_STATES:
            if session.deleted_after and now >= session.deleted_after:
                await on_thread(expire)(session)
            return
        if session.state == SessionState.STOPPING or run is None or sandbox is None:
            return
        if session.expires_at and now >= session.expires_at:
            await db(ask_stop)(session, "lifetime", SYSTEM)
            return
        idle = (now - session.last_active_at).total_seconds()
        if session.state == SessionState.STARTING:
            await self._starting(session)
        elif session.state == SessionState.READY:
            if await db(applier.has_pending)(session):
                await applier.apply_pending(session)  # its signal was lost: a tick late
            elif await db(_busy)(session):
                if now - session.last_active_at > TOUCH_EVERY:
                    await db(session.touch)()
            elif idle >= session.idle_stop_s:
                await db(ask_stop)(session, "idle", SYSTEM)
            elif idle >= session.idle_freeze_s:
                await freeze(session, self._move)
        elif session.state == SessionState.FREEZING:
            if sandbox.paused:
                await db(self._move)(session, SessionState.FROZEN, frozen_at=now)
            elif session.frozen_at and now - session.frozen_at > FREEZING_FOR:
                await db(self._move)(session, SessionState.READY, frozen_at=None)
        elif session.state == SessionState.FROZEN:
            if not sandbox.paused:
                # Thawed by the engine itself (Docker can, on signals): ready again.
                await db(self._move)(session, SessionState.READY, frozen_at=None)
            elif idle >= session.idle_stop_s:
                await db(ask_stop)(session, "idle", SYSTEM)

    async def _starting(self, session: Session) -> None:
        run = session.run
        assert run is not None and run.sandbox is not None
        started = session.started_at or timezone.now()
        late = (timezone.now() - started).total_seconds() > settings.SESSION_START_DEADLINE_S
        if run.state == RunState.RUNNING and run.sandbox.state == SandboxState.RUNNING:
            sandbox = run.sandbox
            try:
                ns = await on_thread(channel_of)(sandbox)
                if sandbox.channel_keyed_at is None:
                    # Its first ping: nothing but the channel runs in it yet (setup has
                    # a container of its own, execs and terminals wait for ready).
                    await hand_key(ns, db(sandbox.mark_channel_keyed))
                await ask(ns, {"op": "ping"}, timeout=1.0)
            except ChannelUnproven:
                return  # its session ends lost (sessions.channel)
            except ChannelError:
                pass
            else:
                # A start again on its volume, or writes while it started: its files
                # reach the branch's head before it is ready for execs.
                try:
                    await applier.apply_pending(session)
                except ChannelError as e:
                    # Tried again at the next tick; past its deadline it stops.
                    log.info("session %s: files not synced yet: %s", session.public_id, e)
                else:
                    now = timezone.now()
                    if await db(self._move)(
                        session, SessionState.READY, ready_at=now, last_active_at=now
                    ):
                        self.woken.set()  # its queued execs go now
                    return
        if late:
            await db(ask_stop)(session, "not_ready", SYSTEM)
            await db(
                lambda: Session.objects.filter(pk=session.pk).update(
                    message=describe_session(
                        "not_ready", deadline_s=settings.SESSION_START_DEADLINE_S
                    )
                )
            )()

    async def resume(self, session: Session) -> None:
        """A frozen session thawed for a door that needs it running now (a terminal),
        under its lock as the exec hand-off does."""
        async with self.locks[session.pk]:
            session = await db(handoff.reload)(session.pk)
            if session.state in (SessionState.FREEZING, SessionState.FROZEN):
                await self._thaw(session)

    async def _thaw(self, session: Session) -> None:
        """Unpaused in the engine (its answer says it runs again), the writes made on
        its branch while it was frozen applied, then ready."""
        assert session.run is not None and session.run.sandbox is not None
        sandbox = session.run.sandbox
        await asyncio.to_thread(backend.pause_sandbox, sandbox.name, False)
        await db(sandbox.mark_paused)(False)
        try:
            await applier.apply_pending(session)
        except ChannelError as e:  # its next exec tries again first
            log.info("session %s: writes not applied on resume yet: %s", session.public_id, e)
        now = timezone.now()
        await db(self._move)(
            session,
            SessionState.READY,
            frozen_at=None,
            resume_requested_at=None,
            last_active_at=now,
        )

    @staticmethod
    def _move(session: Session, to: str, **fields: Any) -> bool:
        allowed = MOVES_FROM[to]
        if session.move(to, allowed, **fields):
            changed(session)
            return True
        return False
