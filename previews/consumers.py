"""WebSocket door onto a preview's log: `/ws/previews/<id>/logs?after=<seq>`, the same
messages as a run's log (runner.consumers), for the preview's current process."""

from accounts.access import Actor
from accounts.auth import authenticate_bearer
from config.errors import NotFound
from previews.access import access_preview
from runner.consumers import RunLogConsumer
from runner.models import Run


class PreviewLogConsumer(RunLogConsumer):
    def authorise(self) -> Run:
        preview_id = self.scope["url_route"]["kwargs"]["preview_id"]
        header = dict(self.scope["headers"]).get(b"authorization")
        if header is not None:
            actor = authenticate_bearer(header.decode("latin-1"))
        else:
            user = self.scope.get("user")
            if user is None or not user.is_authenticated:
                raise NotFound("No such preview.")
            actor = Actor(user)
        preview = access_preview(actor, preview_id)
        if preview.run is None:
            raise NotFound("This preview has no process yet.")
        return preview.run
