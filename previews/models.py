from datetime import timedelta

from django.conf import settings
from django.db import models
from django.dispatch import Signal
from django.utils import timezone

from accounts.models import ApiToken
from core.ids import new_id
from runs.models import Run
from workspaces.models import Workspace


class PreviewState(models.TextChoices):
    STARTING = "starting"
    READY = "ready"
    FAILED = "failed"  # never became ready
    STOPPED = "stopped"  # stopped on purpose (a user, idleness, quota)
    CRASHED = "crashed"  # was ready, then its process ended


LIVE_STATES = (PreviewState.STARTING, PreviewState.READY)
# Never ready, or ready and then crashed: their page shows the last lines of the log.
FAILED_STATES = (PreviewState.FAILED, PreviewState.CRASHED)


class Preview(models.Model):
    """A workspace's app, running from one commit in a long-lived sandbox.

    The sandbox itself is a Run of purpose "preview" (`run`): the same contract,
    hardening, setup step, dependency cache and log as any run. A restart is a new
    Run; this row keeps the preview's own state machine and its address.
    """

    public_id = models.CharField(max_length=12, unique=True, default=new_id, editable=False)
    workspace = models.ForeignKey(Workspace, models.CASCADE, related_name="previews")
    # "preview", "release": a deploy's process (deploys.Release), served on the
    # workspace's release host and never stopped for idleness or quota, or "session":
    # an app a session's exec started, served from that session's running container
    # (`session`; no run of its own: its life is the session's, previews.of_sessions).
    kind = models.CharField(max_length=10, default="preview", db_index=True)
    session = models.ForeignKey(
        "live_sessions.Session", models.CASCADE, null=True, blank=True, related_name="previews"
    )
    # A release runs its built image (empty: the image of workspace.toml, as runs).
    image = models.CharField(max_length=200, blank=True)
    ref = models.CharField(max_length=200)
    commit = models.CharField(max_length=40)
    # Restart on each new commit of `ref` (a branch).
    follow = models.BooleanField(default=False)
    command = models.TextField()
    port = models.PositiveIntegerField()
    health_path = models.CharField(max_length=500, default="/")
    idle_timeout_s = models.PositiveIntegerField(default=30 * 60)
    public = models.BooleanField(default=False)
    run = models.ForeignKey(Run, models.SET_NULL, null=True, blank=True, related_name="+")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.SET_NULL, null=True, related_name="+"
    )
    token = models.ForeignKey(ApiToken, models.SET_NULL, null=True, blank=True, related_name="+")
    state = models.CharField(
        max_length=10, choices=PreviewState.choices, default=PreviewState.STARTING, db_index=True
    )
    reason = models.CharField(max_length=40, blank=True)
    message = models.TextField(blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    # Health: the last status seen (None: nothing answered on the port yet).
    last_health_status = models.IntegerField(null=True, blank=True)
    last_health_at = models.DateTimeField(null=True, blank=True)
    # Where the proxy connects: the pid of the sandbox's process and the inode of its
    # network namespace (both checked at each connect; see sandbox.netns).
    sandbox_pid = models.IntegerField(null=True, blank=True)
    sandbox_netns = models.BigIntegerField(null=True, blank=True)
    last_request_at = models.DateTimeField(null=True, blank=True)
    restarts = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(default=timezone.now)  # of the current process
    ready_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["workspace", "-created_at"])]

    def __str__(self) -> str:
        return f"preview {self.public_id} ({self.state})"

    @property
    def is_live(self) -> bool:
        return self.state in LIVE_STATES

    @property
    def host(self) -> str:
        """A preview's own host; a release's process answers on its workspace's."""
        if self.kind == "release":
            return f"{self.workspace.slug}--{self.workspace.team.slug}.{settings.APPS_DOMAIN}"
        return f"{self.public_id}.{settings.PREVIEW_DOMAIN}"

    @property
    def process_host(self) -> str:
        """The runner host its process runs on (its session's, for a session's): whose
        namespace `sandbox_pid` names. `host` is the preview's hostname."""
        if self.session_id is not None:
            return self.session.runner_host if self.session else ""
        return self.run.runner_host if self.run else ""

    def url(self, port: str = "") -> str:
        """The preview's own address: on the gateway's PREVIEW_PORT, else on `port`,
        Berth's, as the asking request came in on (an edge routes it to the gateway)."""
        port = settings.PREVIEW_PORT or port
        return f"http://{self.host}" + (f":{port}" if port and port != "80" else "") + "/"

    def idle_for(self) -> timedelta | None:
        since = self.last_request_at or self.ready_at
        return timezone.now() - since if since else None

    def move(self, to: str, from_states: tuple[str, ...], **fields: object) -> bool:
        """A conditional UPDATE, as Run.advance: the agent, a task and a user racing can
        never both write one transition."""
        updated = Preview.objects.filter(pk=self.pk, state__in=from_states).update(
            state=to, **fields
        )
        if updated:
            self.refresh_from_db()
        return bool(updated)

    def hold(self, reason: str, message: str) -> bool:
        """An ended process Berth did not start again (a release's restore that today's
        approvals refuse): stopped, saying why. One conditional UPDATE that skips a row
        already saying so: the safety net repeats the refusal at each try, and a crash's
        own try may race it, yet it is written (and recorded) once."""
        updated = (
            Preview.objects.filter(pk=self.pk, state__in=(*FAILED_STATES, PreviewState.STOPPED))
            .exclude(reason=reason, message=message)
            .update(state=PreviewState.STOPPED, reason=reason, message=message)
        )
        if updated:
            self.refresh_from_db()
        return bool(updated)

    # Field changes that are not state transitions: each in one place, here.

    def record_namespace(self, run_id: int, pid: int, netns: int) -> None:
        """Where the proxy connects, for the run that is still this preview's process
        (a restart meanwhile made another: its namespace is found again)."""
        Preview.objects.filter(pk=self.pk, run_id=run_id).update(
            sandbox_pid=pid, sandbox_netns=netns
        )

    def record_health(self, status: int | None) -> None:
        Preview.objects.filter(pk=self.pk).update(
            last_health_status=status, last_health_at=timezone.now()
        )

    @staticmethod
    def record_request(pk: int) -> None:
        """A request reached it (the idle clock): the gateway's lookups write it at
        most once a second per preview."""
        Preview.objects.filter(pk=pk).update(last_request_at=timezone.now())


# Sent after the commit that moved a preview to ready, failed or crashed (kwargs:
# preview): a release's deploy follows its process from here.
preview_changed = Signal()


class PreviewTicket(models.Model):
    """A single-use ticket: the app hands it out (after its access check), the preview
    host exchanges it once for a cookie of its own."""

    nonce = models.CharField(max_length=40, unique=True)
    preview = models.ForeignKey(Preview, models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, models.CASCADE, related_name="+")
    token = models.ForeignKey(ApiToken, models.CASCADE, null=True, blank=True, related_name="+")
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"ticket for {self.preview_id}"

    @staticmethod
    def use(nonce: str, public_id: str) -> "PreviewTicket | None":
        """The ticket, used once now: None if it is unknown, used, expired or issued for
        another preview (one conditional UPDATE: two redeems racing, one wins)."""
        now = timezone.now()
        used = PreviewTicket.objects.filter(
            nonce=nonce, preview__public_id=public_id, used_at__isnull=True, expires_at__gt=now
        ).update(used_at=now)
        return PreviewTicket.objects.get(nonce=nonce) if used else None
