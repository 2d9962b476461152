"""WebSocket doors onto a preview.

`/ws/previews/<id>/logs?after=<seq>`: the same messages as a run's log
(runs.consumers), for the preview's current process, and the same end when the
watcher's access goes.

`/ws/previews/<id>/state`: `{"type": "state", state, reason, run}` at once and again at
each move of the preview (a crash, a stop, a restart's new process, ready), for the
workspace page's pane to update itself. Every move is signalled to the preview's moves
group (previews.actions); a signal is only a wake-up, the row is read again.
"""

from collections.abc import Mapping
from typing import Any

from core.errors import NotFound
from previews.access import access_preview
from previews.gate import moves_group
from previews.models import Preview
from runs.consumers import LogConsumer, RunLogConsumer, StateConsumer
from runs.models import Run


class PreviewAccess(LogConsumer):
    """The preview, not its process: a restart between two checks is not a refusal."""

    def preview(self) -> Preview:
        actor = self.scope_actor()
        preview = access_preview(actor, self.scope["url_route"]["kwargs"]["preview_id"])
        self.access_of = (preview.workspace.team_id, actor)
        return preview

    def check_access(self) -> None:
        self.preview()


class PreviewLogConsumer(PreviewAccess, RunLogConsumer):
    def authorise(self) -> Run:
        preview = self.preview()
        if preview.run is None:
            raise NotFound("This preview has no process yet.")
        return preview.run


class PreviewStateConsumer(PreviewAccess, StateConsumer):
    # No final state: a crashed, failed or stopped preview may be restarted.

    def authorise(self) -> Preview:
        return self.preview()

    def group_for(self, public_id: str) -> str:
        return moves_group(public_id)

    async def preview_moved(self, message: dict[str, Any]) -> None:
        self.wake.set()
        # A move may be its session's new grant, which this viewer may not cover.
        event = getattr(self, "access_event", None)
        if event is not None:
            event.set()

    def state_now(self) -> Mapping[str, Any] | None:
        row = (
            Preview.objects.filter(public_id=self.followed_id)
            .values("state", "reason", "run__public_id")
            .first()
        )
        if row is None:
            return None
        return {"state": row["state"], "reason": row["reason"], "run": row["run__public_id"]}
