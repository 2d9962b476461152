"""Waiting for an exec's end or a session's next state without polling: a wait listens
on the channel-layer group its writer signals, and looks at the row only on a signal
or every RECHECK_S without one (a dropped signal costs that much delay, never the end)."""

import asyncio
from collections.abc import Callable

from channels.db import database_sync_to_async
from django.db.models import Q

from core import fanout
from logs import logstore
from sessions.lifecycle import group_name
from sessions.models import LIVE_STATES, Exec, ExecState, Session, Snapshot, SnapshotState
from sessions.snapstore import ReadGone

MAX_WAIT_S = 120
RECHECK_S = 2.0


async def _wait(group: str, done: Callable[[], bool], seconds: float, on_end_signal: bool) -> None:
    seconds = min(seconds, MAX_WAIT_S)
    if seconds <= 0:
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    # Joined before the first look: a move written in between still wakes us.
    async with fanout.listening(group) as next_signal:
        while True:
            if await database_sync_to_async(done)() or loop.time() >= deadline:
                return
            checked = loop.time()
            while (left := min(deadline, checked + RECHECK_S) - loop.time()) > 0:
                message = await next_signal(left)
                if message is None:
                    break
                if not on_end_signal or message.get("ended"):
                    break


async def wait_for_exec(public_id: str, seconds: float) -> None:
    """Until the exec has ended or `seconds` pass (at most MAX_WAIT_S)."""
    await _wait(
        logstore.group_name(public_id),
        Exec.objects.filter(public_id=public_id, state=ExecState.ENDED).exists,
        seconds,
        on_end_signal=True,
    )


async def wait_for_session(public_id: str, states: tuple[str, ...], seconds: float) -> None:
    """Until the session is in one of `states` or `seconds` pass."""
    await _wait(
        group_name(public_id),
        Session.objects.filter(public_id=public_id, state__in=states).exists,
        seconds,
        on_end_signal=False,
    )


async def wait_for_read(public_id: str, pk: int, seconds: float) -> None:
    """Until a read of the session's files (Snapshot `pk`) is made, the session stops
    (no read can be made then), or `seconds` pass."""
    await _wait(
        group_name(public_id),
        Snapshot.objects.filter(
            Q(pk=pk) & (~Q(state=SnapshotState.PENDING) | ~Q(session__state__in=LIVE_STATES))
        ).exists,
        seconds,
        on_end_signal=False,
    )


async def with_read[T](
    public_id: str, ask: Callable[[], int], use: Callable[[int], T], seconds: float
) -> T:
    """A read of the session's files asked for (`ask` makes its row), waited for, then
    used (`use`, given the row's pk). A newer read done in between may have taken its
    store (sessions.snapstore): asked once more then, so a door racing another door
    still answers."""

    async def once() -> T:
        pk = await database_sync_to_async(ask)()
        await wait_for_read(public_id, pk, seconds)
        return await database_sync_to_async(use)(pk)

    try:
        return await once()
    except ReadGone:
        return await once()
