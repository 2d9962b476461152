"""A WebSocket is authorised once, at connect, but may stream for hours: it must end
when the authority it was opened with does.

Each such consumer joins its person's group in the team it reads
(`access_<team id>_<user id>`). Revoking a token and removing a member signal that
group after commit, and every socket in it checks its access again at once; a token's
expiry is a timer of its own; and every WEBSOCKET_ACCESS_RECHECK_S each socket checks
anyway (a signal is only a wake-up and may be lost, and a session can end by signing
out or a password change, which signal nothing). A socket that lost its access closes
with the code a new connection would get now: 4401 for a revoked or expired token,
4404 for a person no longer in the team (or signed out).
"""

import asyncio
import contextlib
import logging
from datetime import datetime
from importlib import import_module
from typing import Any

from channels.auth import get_user
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.utils import timezone

from accounts.access import Actor
from accounts.auth import authenticate_bearer
from core import fanout
from core.errors import NotFound

log = logging.getLogger(__name__)


def group_name(team_id: int, user_id: int) -> str:
    return f"access_{team_id}_{user_id}"


def signal_changed(team_id: int, user_id: int) -> None:
    """Tell the person's sockets in the team to check their access again (in the
    background; a lost signal is caught by the periodic check)."""
    try:
        fanout.group_send(group_name(team_id, user_id), {"type": "access.changed"})
    except Exception as e:  # Redis down must never undo or fail the revocation
        log.warning("access change not signalled: %r", e)


class AccessCheckedConsumer(AsyncJsonWebsocketConsumer):
    """A consumer that checks its access again while it is open.

    A subclass calls `watch_access` once it has accepted, and implements
    `close_code_now`: None while the connection may go on, else the code to close with.
    """

    access_group = ""
    access_task: "asyncio.Task[None] | None" = None
    access_expires_at: datetime | None = None
    # Tasks that stream to the client: cancelled before the close, so nothing more is
    # sent once access is gone.
    streaming_task: "asyncio.Task[None] | None" = None

    async def watch_access(
        self, team_id: int, user_id: int, expires_at: datetime | None = None
    ) -> None:
        self.access_event = asyncio.Event()
        self.access_expires_at = expires_at
        self.access_group = group_name(team_id, user_id)
        await self.channel_layer.group_add(self.access_group, self.channel_name)
        self.access_task = asyncio.create_task(self._guard_access())

    async def close_code_now(self) -> int | None:
        raise NotImplementedError

    def scope_actor(self) -> Actor:
        """Who the socket acts for: its bearer token, else the signed-in person (404
        for nobody: nothing here says what exists)."""
        header = dict(self.scope["headers"]).get(b"authorization")
        if header is not None:
            return authenticate_bearer(header.decode("latin-1"))
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            raise NotFound("Nothing here for you; sign in or send a token.")
        return Actor(user)

    async def access_changed(self, message: dict[str, Any]) -> None:
        self.access_event.set()  # only a wake-up: the access is read from the database

    async def current_user(self) -> User | AnonymousUser:
        """The session's user as the session store says now (it may have been signed
        out since connect: the scope's session object holds what it read then)."""
        session = self.scope.get("session")
        if session is None or not session.session_key:
            return AnonymousUser()
        fresh = import_module(settings.SESSION_ENGINE).SessionStore(session.session_key)
        return await get_user({**self.scope, "session": fresh})

    def _wait_s(self) -> float:
        wait = float(settings.WEBSOCKET_ACCESS_RECHECK_S)
        if self.access_expires_at is not None:
            # Just past the expiry: a timer that fires a moment early finds it valid.
            left = (self.access_expires_at - timezone.now()).total_seconds() + 0.05
            wait = min(wait, left)
        return max(wait, 0.0)

    async def _guard_access(self) -> None:
        try:
            while True:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.access_event.wait(), self._wait_s())
                self.access_event.clear()
                code = await self.close_code_now()
                if code is not None:
                    if self.streaming_task is not None:
                        self.streaming_task.cancel()
                    await self.close(code=code)
                    return
        except asyncio.CancelledError:
            raise
        except Exception:
            # A check that cannot be made (the database away) ends the connection: it
            # may not go on unchecked. The client reconnects and is asked again.
            log.exception("checking a WebSocket's access failed")
            if self.streaming_task is not None:
                self.streaming_task.cancel()
            await self.close(code=1011)

    async def stop_watching_access(self) -> None:
        if self.access_task is not None and self.access_task is not asyncio.current_task():
            self.access_task.cancel()
        if self.access_group:
            await self.channel_layer.group_discard(self.access_group, self.channel_name)
