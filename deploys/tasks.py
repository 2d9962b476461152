"""Short Celery steps of deploys."""

from celery import shared_task

from deploys.images import prune_images
from deploys.models import Route
from previews import actions as preview_actions
from previews.models import Preview


@shared_task(acks_late=True, ignore_result=True)
def stop_release_process(preview_id: int) -> None:
    """The process of a release the route moved away from, after its drain time."""
    preview = Preview.objects.select_related("workspace__team", "run").filter(pk=preview_id).first()
    if preview is None or not preview.is_live:
        return
    if Route.objects.filter(release__process=preview).exists():
        return  # routed to it again meanwhile (a rollback): keep it
    preview_actions.stop_preview(preview, None, reason="superseded")
    # Its image was kept while it ran; it may be one too many now.
    prune_images(preview.workspace)
