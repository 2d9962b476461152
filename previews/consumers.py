"""WebSocket door onto a preview's log: `/ws/previews/<id>/logs?after=<seq>`, the same
messages as a run's log (runs.consumers), for the preview's current process, and the
same end when the watcher's access goes."""

from core.errors import NotFound
from previews.access import access_preview
from previews.models import Preview
from runs.consumers import RunLogConsumer
from runs.models import Run


class PreviewLogConsumer(RunLogConsumer):
    def authorise(self) -> Run:
        preview = self.preview()
        if preview.run is None:
            raise NotFound("This preview has no process yet.")
        return preview.run

    def check_access(self) -> None:
        # The preview, not its process: a restart between two checks is not a refusal.
        self.preview()

    def preview(self) -> Preview:
        actor = self.scope_actor()
        preview = access_preview(actor, self.scope["url_route"]["kwargs"]["preview_id"])
        self.access_of = (preview.workspace.team_id, actor)
        return preview
