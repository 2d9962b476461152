"""What a viewer's preview frame navigated to, as the preview gateway saw it: the
workspace page's address bar shows it (a cross-origin frame's location cannot be read
by Berth's page). The gateway sends each navigation into a frame to a group of that
preview and viewer; `/ws/previews/<id>/navigations` forwards them to the viewer's own
pages alone: `{"type": "navigated", "path": "/cart?x=1"}`.
"""

from typing import Any

from channels.db import database_sync_to_async

from accounts.socket_access import AccessCheckedConsumer
from core.errors import BerthError
from previews.access import access_preview
from previews.gate import moves_group
from previews.nav_signal import group


class NavigationConsumer(AccessCheckedConsumer):
    nav_group = ""
    moves = ""

    def authorise(self) -> tuple[str, int, int]:
        actor = self.scope_actor()
        preview = access_preview(actor, self.scope["url_route"]["kwargs"]["preview_id"])
        return preview.public_id, actor.user.pk, preview.workspace.team_id

    async def connect(self) -> None:
        try:
            preview_id, user_id, team_id = await database_sync_to_async(self.authorise)()
        except BerthError as e:
            await self.accept()
            await self.close(code=4000 + e.status)
            return
        self.nav_group = group(preview_id, user_id)
        await self.channel_layer.group_add(self.nav_group, self.channel_name)
        # Its preview's moves too: one may be its session's new grant, which this
        # socket's token may not cover (checked again at once).
        self.moves = moves_group(preview_id)
        await self.channel_layer.group_add(self.moves, self.channel_name)
        await self.accept()
        await self.watch_access(team_id, user_id)

    async def preview_moved(self, message: dict[str, Any]) -> None:
        event = getattr(self, "access_event", None)
        if event is not None:
            event.set()

    async def preview_navigated(self, message: dict[str, Any]) -> None:
        await self.send_json({"type": "navigated", "path": message["path"]})

    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any
    ) -> None:
        pass  # nothing to say to it

    async def close_code_now(self) -> int | None:
        if b"authorization" not in dict(self.scope["headers"]):
            self.scope["user"] = await self.current_user()
        try:
            await database_sync_to_async(self.authorise)()
        except BerthError as e:
            return 4000 + e.status
        return None

    async def disconnect(self, code: int) -> None:
        if self.nav_group:
            await self.channel_layer.group_discard(self.nav_group, self.channel_name)
        if self.moves:
            await self.channel_layer.group_discard(self.moves, self.channel_name)
        await self.stop_watching_access()
