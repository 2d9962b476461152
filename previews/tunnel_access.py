"""A WebSocket tunnelled to a preview's or release's app is let in once, by its viewer
cookie, but may stay open for hours: it ends when the cookie's holder may no longer see
the target.

The preview gateway relays the tunnel (previews.tunnel); the web process watches its
viewer (previews.decide): the gateway's question about the handshake stays open while
access holds, and its answer, once it does not, is the close code the gateway closes
the tunnel with. The gateway's hot path does no check of its own.

A tunnel listens to its viewer's access group in the team (accounts.socket_access:
removing a member and revoking a token signal it) and to the target's moves (made
private, stopped, its session granted a secret its token does not cover). It checks at
once (what let it in may be a cached answer up to PREVIEW_VIEWER_TTL_S old), on each
signal, when the cookie or its token expires, and every
WEBSOCKET_ACCESS_RECHECK_S anyway (a signal is only a wake-up and may be lost). Each
check is one lookup, never one per message. A public target's tunnel is left alone
while the target stays public.
"""

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from channels.db import database_sync_to_async
from django.conf import settings
from django.utils import timezone

from accounts import socket_access
from core import fanout
from previews import gate

if TYPE_CHECKING:
    from previews.lookups import Lookups

log = logging.getLogger("berth.previews")

CHECK_FAILED = 1011  # the check could not be made: the tunnel may not go on unchecked


def standing(public_id: str, cookie: str | None) -> gate.Standing:
    """The viewer's access to the target as the database says now."""
    t = gate.target(public_id)
    if t is None:
        return gate.Standing(gate.CLOSE_NO_ACCESS)
    if t.public:
        return gate.Standing(None)
    return gate.viewer_standing(cookie, t)


async def _quiet(timeout: float) -> None:
    """No channel layer to listen to: only the timer wakes the check."""
    await asyncio.sleep(timeout)


async def watch(lookups: "Lookups", t: gate.Target, cookie: str | None) -> int:
    """Return once the viewer holding `cookie` may no longer see `t`: the WebSocket
    close code a new connection would get now (never returns while access holds)."""
    groups = [gate.moves_group(t.public_id)]
    user = gate.cookie_user(cookie)
    if user is not None:
        groups.append(socket_access.group_name(t.team_id, user))
    async with contextlib.AsyncExitStack() as stack:
        next_signal: Callable[[float], Awaitable[Any]]
        try:
            next_signal = await stack.enter_async_context(fanout.listening(*groups))
        except Exception as e:  # Redis away: the timer still checks
            log.warning("preview %s: a tunnel hears no access changes: %r", t.public_id, e)
            next_signal = _quiet
        wait = 0.0
        while True:
            if wait > 0:
                try:
                    await next_signal(wait)
                except Exception as e:
                    log.warning(
                        "preview %s: a tunnel stops hearing access changes: %r", t.public_id, e
                    )
                    next_signal = _quiet
            since = lookups.generation
            try:
                now = await database_sync_to_async(standing)(t.public_id, cookie)
            except Exception:
                log.exception("preview %s: checking a tunnel's access failed", t.public_id)
                return CHECK_FAILED
            if cookie:
                # The HTTP requests of this process learn it too (their cache's entry).
                lookups.remember_viewer(t.public_id, cookie, now.code, since)
            if now.code is not None:
                log.info(
                    "preview %s: a tunnel's viewer lost access (%d): closing it",
                    t.public_id,
                    now.code,
                )
                return now.code
            wait = float(settings.WEBSOCKET_ACCESS_RECHECK_S)
            if now.until is not None:
                # Just past the expiry: a timer that fires a moment early finds it valid.
                wait = min(wait, (now.until - timezone.now()).total_seconds() + 0.05)
            wait = max(wait, 0.05)
