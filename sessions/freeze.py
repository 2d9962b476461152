"""Freezing a session: `docker pause`, told to the preview gateways first.

A paused container keeps its sockets: a request sent into it is accepted by the kernel
and then hangs until the resume, with nobody to resume it. So a session something
serves from (previews of a session, sessions.lifecycle.is_served) is frozen in steps:
1. ready → freezing (the row says so: a gateway that looks the preview up from now on
   stops forwarding into it, and asks the web process, which resumes the session);
2. the gateways are told at once (GATEWAYS_GROUP): they drop what they cached of its
   previews, and one still in the middle of a request to it counts that as activity;
3. any activity since step 1, within SESSION_FREEZE_NOTICE_S (longer than a gateway
   keeps a lookup, so one that missed the signal has looked again), calls it off: ready
   again. Otherwise the engine pauses it; it is frozen once the engine says so.
A session nothing serves from is paused at once (no gateway can be sending into it).
"""

import asyncio
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.utils import timezone

from core import fanout
from sandbox import backend
from sandbox.loop import db
from sessions.lifecycle import GATEWAYS_GROUP, is_served
from sessions.models import Session, SessionState

Move = Callable[..., bool]
CHECK_S = 0.1


def _active_since(pk: int, when: Any) -> bool:
    return Session.objects.filter(pk=pk, last_active_at__gt=when).exists()


async def _called_off(session: Session, idle_since: Any) -> bool:
    """Whether there was activity within the notice (looked at every CHECK_S: a request
    that came meanwhile waits for the session to be ready again, so not the whole
    notice)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settings.SESSION_FREEZE_NOTICE_S
    while True:
        if await db(_active_since)(session.pk, idle_since):
            return True
        left = deadline - loop.time()
        if left <= 0:
            return False
        await asyncio.sleep(min(CHECK_S, left))


async def freeze(session: Session, move: Move) -> None:
    """Paused in the engine, the gateways told first (the steps above). `move` is the
    keeper's conditional move (it announces each one)."""
    assert session.run is not None and session.run.sandbox is not None
    idle_since = session.last_active_at
    # frozen_at: when the pause was asked, until the engine says it is paused.
    # A resume asked for while it was ready is no news: only one asked from now on is.
    if not await db(move)(
        session, SessionState.FREEZING, frozen_at=timezone.now(), resume_requested_at=None
    ):
        return
    if await db(is_served)(session):
        fanout.group_send(
            GATEWAYS_GROUP, {"type": "session.freezing", "session": session.public_id}
        )
        if await _called_off(session, idle_since):
            await db(move)(session, SessionState.READY, frozen_at=None, resume_requested_at=None)
            return
    if not await asyncio.to_thread(backend.pause_sandbox, session.run.sandbox.name, True):
        await db(move)(session, SessionState.READY)
