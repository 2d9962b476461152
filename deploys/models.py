"""Deploys: anyone allowed may ask; only a human reviewer may
approve; the release is built from exactly the approved commit, health-checked, then
switched in, and earlier releases stay for rollback."""

from datetime import datetime

from django.conf import settings
from django.db import models, transaction
from django.utils import timezone

from accounts.models import ApiToken
from core import fanout
from core.ids import new_id
from previews.models import Preview
from runs.models import Run
from workspaces.models import Workspace


class DeployState(models.TextChoices):
    REQUESTED = "requested"
    APPROVED = "approved"
    REJECTED = "rejected"
    CANCELLED = "cancelled"
    BUILDING = "building"
    RELEASING = "releasing"
    LIVE = "live"
    FAILED = "failed"
    SUPERSEDED = "superseded"
    ROLLED_BACK = "rolled_back"


PENDING = (DeployState.REQUESTED,)
IN_FLIGHT = (DeployState.APPROVED, DeployState.BUILDING, DeployState.RELEASING)
# No move leaves these.
FINAL_STATES = (
    DeployState.REJECTED,
    DeployState.CANCELLED,
    DeployState.FAILED,
    DeployState.SUPERSEDED,
    DeployState.ROLLED_BACK,
)


def moves_group(public_id: str) -> str:
    """The channel-layer group told of each move of a deploy request."""
    return f"deploy_moves_{public_id}"


class DeployRequest(models.Model):
    """A request to ship one commit. The commit is resolved when asked for and never
    changes: an approval approves exactly it."""

    public_id = models.CharField(max_length=12, unique=True, default=new_id, editable=False)
    workspace = models.ForeignKey(Workspace, models.CASCADE, related_name="deploys")
    ref = models.CharField(max_length=200)
    commit = models.CharField(max_length=40)
    note = models.TextField(blank=True)
    # The human behind it: the signed-in user, or the owner of the token that asked.
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.SET_NULL, null=True, related_name="+"
    )
    token = models.ForeignKey(ApiToken, models.SET_NULL, null=True, blank=True, related_name="+")
    state = models.CharField(
        max_length=12, choices=DeployState.choices, default=DeployState.REQUESTED, db_index=True
    )
    reason = models.CharField(max_length=40, blank=True)
    message = models.TextField(blank=True)
    # Approved with "replace the newer live release": it may switch in over a newer one.
    confirmed_older = models.BooleanField(default=False)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True, related_name="+"
    )  # rejected or cancelled
    build_run = models.ForeignKey(Run, models.SET_NULL, null=True, blank=True, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    approved_at = models.DateTimeField(null=True, blank=True)
    building_at = models.DateTimeField(null=True, blank=True)
    built_at = models.DateTimeField(null=True, blank=True)
    releasing_at = models.DateTimeField(null=True, blank=True)
    live_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"deploy {self.public_id} ({self.state})"

    def move(self, to: str, from_states: tuple[str, ...], **fields: object) -> bool:
        """A conditional UPDATE: two approvals, a cancel and a build end racing can
        never both write one transition (exactly one release per approval)."""
        updated = DeployRequest.objects.filter(pk=self.pk, state__in=from_states).update(
            state=to, **fields
        )
        if updated:
            self.refresh_from_db()
            # Its review page updates itself (deploys.consumers); after commit, so the
            # page reads the new state.
            group = moves_group(self.public_id)
            transaction.on_commit(lambda: fanout.group_send(group, {"type": "deploy.moved"}))
        return bool(updated)


class Approval(models.Model):
    """One reviewer's approval; a team may require several distinct ones."""

    request = models.ForeignKey(DeployRequest, models.CASCADE, related_name="approvals")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, models.CASCADE, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint("request", "user", name="one_approval_each")]
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.user} approved {self.request_id}"


class Release(models.Model):
    """An image built from an approved commit, and the process serving it. Numbered per
    workspace; the last RELEASES_KEPT images stay for rollback."""

    workspace = models.ForeignKey(Workspace, models.CASCADE, related_name="releases")
    number = models.PositiveIntegerField()
    request = models.ForeignKey(DeployRequest, models.CASCADE, related_name="releases")
    commit = models.CharField(max_length=40)
    image = models.CharField(max_length=200)
    rollback_of = models.ForeignKey(
        "self", models.SET_NULL, null=True, blank=True, related_name="+"
    )
    # The release's process: a preview of kind "release" (same proxy, health checks,
    # crash handling and log as previews).
    process = models.ForeignKey(Preview, models.SET_NULL, null=True, blank=True, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    live_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    image_removed_at = models.DateTimeField(null=True, blank=True)
    # After an engine restart or a crash the agent starts it again; when, and how often.
    restored_at = models.DateTimeField(null=True, blank=True)
    restorations = models.PositiveIntegerField(default=0)
    restore_tried_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint("workspace", "number", name="one_release_number")]
        ordering = ["-number"]

    def __str__(self) -> str:
        return f"release {self.number} of {self.workspace}"

    # Field changes of a release: each in one place, here.

    def attach_process(self, process: Preview) -> None:
        Release.objects.filter(pk=self.pk).update(process=process)
        self.process = process

    def mark_live(self, at: datetime) -> None:
        Release.objects.filter(pk=self.pk).update(live_at=at)

    def mark_ended(self, at: datetime) -> None:
        """Switched away from (or never switched in): its process is stopped after."""
        Release.objects.filter(pk=self.pk).update(ended_at=at)

    def mark_restored(self) -> None:
        """Its process is healthy again: the next failure may be retried at once."""
        Release.objects.filter(pk=self.pk).update(restored_at=timezone.now(), restore_tried_at=None)

    def count_restore_try(self, at: datetime) -> None:
        Release.objects.filter(pk=self.pk).update(
            restorations=self.restorations + 1, restore_tried_at=at
        )

    @staticmethod
    def mark_image_removed(image: str) -> None:
        """Every release of `image` (a rollback's shares its original's)."""
        Release.objects.filter(image=image).update(image_removed_at=timezone.now())


class Route(models.Model):
    """Which release the workspace's release host serves: switched in one UPDATE, only
    once the new release answers its health check."""

    workspace = models.OneToOneField(Workspace, models.CASCADE, related_name="route")
    release = models.ForeignKey(Release, models.PROTECT, related_name="+")
    switched_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.workspace} -> release {self.release.number}"

    @staticmethod
    def switch(current: "Route | None", release: Release, at: datetime) -> None:
        """Point the workspace's release host at `release`: its first release makes the
        row; later ones update `current`, the row the caller holds locked."""
        if current is None:
            Route.objects.create(workspace=release.workspace, release=release, switched_at=at)
        else:
            Route.objects.filter(pk=current.pk).update(release=release, switched_at=at)


def routed_process(workspace: str, team: str) -> str | None:
    """The public id of the release process a workspace's release host serves now."""
    return (
        Route.objects.filter(workspace__slug=workspace, workspace__team__slug=team)
        .values_list("release__process__public_id", flat=True)
        .first()
    )
