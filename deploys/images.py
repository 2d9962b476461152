"""Release images: the last RELEASES_KEPT releases' stay for rollback, and the live
one's; older ones are removed once no process runs them."""

from deploys.actions import RELEASES_KEPT
from deploys.models import Release, Route
from previews.models import LIVE_STATES, Preview
from sandbox import backend
from workspaces.models import Workspace


def prune_images(workspace: Workspace) -> None:
    """Keep the images of the last RELEASES_KEPT releases (and the live one's)."""
    live = Route.objects.filter(workspace=workspace).values_list("release__image", flat=True)
    kept = set(
        Release.objects.filter(workspace=workspace)
        .exclude(live_at=None)
        .order_by("-number")
        .values_list("image", flat=True)[:RELEASES_KEPT]
    ) | set(live)
    # Releases that went live and fell out of the last few, and ones that never did.
    for old in (
        Release.objects.filter(workspace=workspace, image_removed_at=None)
        .exclude(image__in=kept)
        .exclude(live_at=None, ended_at=None)
    ):
        in_use = Preview.objects.filter(image=old.image, state__in=LIVE_STATES).exists()
        if not in_use:
            backend.remove_image(old.image)
            Release.mark_image_removed(old.image)
