"""WebSocket door onto a team's activity: `/ws/t/<team>/activity?after=<id>&workspace=`.

Sends `{"type": "entries", "entries": [...]}` for rows after the cursor, then again as
new rows are committed. Only signed-in members of the team; anything else closes 4404,
and so does an open socket whose person leaves the team or signs out
(accounts.socket_access).
"""

import asyncio
import contextlib
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async

from accounts import feed
from accounts.models import Membership
from accounts.socket_access import AccessCheckedConsumer

RECHECK_S = 10.0  # as runs.consumers': the longest a lost signal delays a look


class ActivityConsumer(AccessCheckedConsumer):
    team_id = 0
    group = ""

    async def connect(self) -> None:
        query = parse_qs(self.scope["query_string"].decode("latin-1"))
        self.workspace = (query.get("workspace") or [""])[-1][:30]
        after = (query.get("after") or ["0"])[-1]
        self.cursor = int(after) if after.isdigit() else 0
        self.team_id = await database_sync_to_async(self.authorise)()
        await self.accept()
        if not self.team_id:
            await self.close(code=4404)
            return
        self.wake = asyncio.Event()
        self.group = feed.group_name(self.team_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        self.pump_task = self.streaming_task = asyncio.create_task(self.pump())
        await self.watch_access(self.team_id, self.scope["user"].pk)

    def authorise(self) -> int:
        user = self.scope.get("user")
        slug = self.scope["url_route"]["kwargs"]["team"]
        if user is None or not user.is_authenticated:
            return 0
        membership = Membership.objects.filter(team__slug=slug, user=user).first()
        return membership.team_id if membership else 0

    async def close_code_now(self) -> int | None:
        self.scope["user"] = await self.current_user()
        still = await database_sync_to_async(self.authorise)()
        return None if still == self.team_id else 4404

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        pass  # nothing to say to the feed

    async def activity_signal(self, message: dict[str, Any]) -> None:
        self.wake.set()  # only a wake-up: the rows are read from the database

    async def pump(self) -> None:
        while True:
            self.wake.clear()
            rows = await database_sync_to_async(feed.rows_after)(
                self.team_id, self.cursor, self.workspace
            )
            if rows:
                self.cursor = rows[-1]["id"]
                await self.send_json({"type": "entries", "entries": rows})
                continue  # there may be more than one batch
            # A signal is only a wake-up, sent without waiting: one lost (a process gone
            # mid-send) delays the next look by RECHECK_S, never forever.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), RECHECK_S)

    async def disconnect(self, code: int) -> None:
        if getattr(self, "pump_task", None) is not None:
            self.pump_task.cancel()
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)
        await self.stop_watching_access()
