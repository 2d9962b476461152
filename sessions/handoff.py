"""An exec handed to its session's exec channel, and a kill sent to it (the runner
agent's sessions.keeper calls these; its lock per session and its thaw are passed in).

1. Hand: under the session's lock, a frozen session is thawed and every write announced
   on its branch is applied; then the exec is marked running, its secrets unsealed, and
   it is sent with the key of its output frames (sessions.frames). An exec asked of an
   earlier start of the session, or one the channel refused, ends `not_started`.
2. Kill: sent while the exec runs; one the channel did not take is sent again at the
   keeper's next tick.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable

from runs import secrets
from sandbox.loop import db, on_thread
from sessions import applier
from sessions.channel import ChannelError, ask, channel_of
from sessions.follow import handed
from sessions.frames import frame_key
from sessions.lifecycle import signal_ended
from sessions.models import Exec, Session, SessionState
from sessions.outcomes import describe_exec

log = logging.getLogger("berth.runner_agent")

Thaw = Callable[[Session], Awaitable[None]]


def reload(pk: int) -> Session:
    """As it is now, with its run and sandbox (read under the session's lock)."""
    return Session.objects.select_related("run__sandbox", "workspace__team").get(pk=pk)


def end(row: Exec, reason: str, message: str) -> None:
    if row.finish(reason, message):
        signal_ended(row)


async def hand(row: Exec, lock: asyncio.Lock, thaw: Thaw, on_grant: Thaw | None) -> None:
    """One exec to its session's channel, once the session is ready and has every
    write on its branch announced so far."""
    running = False
    try:
        async with lock:
            session = await db(reload)(row.session_id)
            if session.state in (SessionState.FREEZING, SessionState.FROZEN):
                await thaw(session)
            if session.state != SessionState.READY:
                return  # starting: handed once ready; stopping: its end ends it
            if session.started_at and row.created_at < session.started_at:
                # Asked of an earlier start that stopped before it ran: never run
                # by a later one, whose files and processes the asker never saw.
                detail = "the session stopped before it ran"
                await db(end)(row, "not_started", describe_exec("not_started", detail=detail))
                return
            await applier.apply_pending(session)
        assert session.run is not None and session.run.sandbox is not None
        ns = await on_thread(channel_of)(session.run.sandbox)
        if not await db(row.mark_running)():
            return
        running = True
        env = {**secrets.open_sealed(row.env_sealed), **secrets.open_sealed(row.secrets_sealed)}
        request = {
            "op": "exec",
            "id": row.public_id,
            "command": row.command,
            "cwd": row.cwd,
            "timeout_s": row.timeout_s,
            "env": env,
            "key": frame_key(row.public_id).hex(),
        }
        handed(session.run.public_id, row.public_id)
        if row.secret_names and on_grant is not None:
            await on_grant(session)  # its terminals mask them before it runs
        try:
            answer = await ask(ns, request)
        except ChannelError as e:
            answer = {"ok": False, "error": str(e)}
        if answer.get("ok"):
            await db(row.record_pid)(int(answer.get("pid") or 0))
        else:
            detail = str(answer.get("detail") or answer.get("error"))
            await db(end)(row, "not_started", describe_exec("not_started", detail=detail))
    except ChannelError as e:
        await db(end)(row, "not_started", describe_exec("not_started", detail=str(e)))
    except Exception as e:
        if not running:
            raise
        # Marked running, then a fault (the database): never a row left running.
        log.exception("exec %s: not handed", row.public_id)
        await db(end)(row, "not_started", describe_exec("not_started", detail=str(e)))


async def kill(row: Exec) -> None:
    session = row.session
    if session.run is None or session.run.sandbox is None:
        return
    try:
        ns = await on_thread(channel_of)(session.run.sandbox)
        await ask(ns, {"op": "kill", "id": row.public_id, "force": row.kill_force})
    except ChannelError as e:
        # Asked again next tick (while it runs): a kill the API accepted is never
        # dropped because the channel did not answer once.
        log.info("exec %s: kill not delivered yet (%s)", row.public_id, e)
        return
    await db(lambda: Exec.objects.filter(pk=row.pk).update(kill_requested_at=None))()
