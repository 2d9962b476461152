"""Waiting for a run's end without polling, for the doors that offer a wait (the API's
`GET /runs/{id}?wait=`, the MCP tools). A wait listens on the run's channel-layer
group (the log store's signals) and looks at the row only on the end's own signal, or
every RECHECK_S without one; nothing polls in between."""

import asyncio

from channels.db import database_sync_to_async

from core import fanout
from logs import logstore
from runs.models import ACTIVE_STATES, Run

MAX_WAIT_S = 120
RECHECK_S = 2.0  # a dropped signal costs at most this much delay, never the end


async def wait_for_end(public_id: str, seconds: float) -> None:
    """Until the run is terminal or `seconds` pass (capped at MAX_WAIT_S)."""
    seconds = min(seconds, MAX_WAIT_S)
    if seconds <= 0:
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    # Joined before the first look: an end written in between still wakes us.
    async with fanout.listening(logstore.group_name(public_id)) as next_signal:
        while True:
            active = await database_sync_to_async(
                Run.objects.filter(public_id=public_id, state__in=ACTIVE_STATES).exists
            )()
            checked = loop.time()
            if not active or checked >= deadline:
                return
            # New entries are signalled many times a second: only the end's signal (or
            # RECHECK_S without one, in case it was lost) is worth a look at the row.
            while (left := min(deadline, checked + RECHECK_S) - loop.time()) > 0:
                message = await next_signal(left)
                if message is not None and message.get("ended"):
                    return  # sent by Run.finish once the end is committed: no need to look
                if message is None:
                    break
