from django.conf import settings
from django.db import models, transaction
from django.utils import timezone

from accounts.ids import new_id
from accounts.models import ApiToken
from workspaces.models import Workspace


class RunState(models.TextChoices):
    QUEUED = "queued"
    PREPARING = "preparing"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    OOM_KILLED = "oom_killed"
    ERROR = "error"
    LOST = "lost"


ACTIVE_STATES = (RunState.QUEUED, RunState.PREPARING, RunState.RUNNING)
TERMINAL_STATES = tuple(s for s in RunState if s not in ACTIVE_STATES)


class Run(models.Model):
    """One execution: what went in, what ran, what came out (DESIGN.md, "A run").

    Inputs are fixed when the run is asked for (a commit SHA, never a moving branch);
    outputs are written once, by whichever process sees the end first.
    """

    public_id = models.CharField(max_length=12, unique=True, default=new_id, editable=False)
    workspace = models.ForeignKey(Workspace, models.CASCADE, related_name="runs")
    # inputs
    ref = models.CharField(max_length=200)
    commit = models.CharField(max_length=40)
    command = models.TextField()
    image = models.CharField(max_length=200)
    image_id = models.CharField(max_length=100, blank=True)
    runtime = models.CharField(max_length=10, default="runc")
    limits = models.JSONField(default=dict)
    network = models.JSONField(default=dict)
    env_names = models.JSONField(default=list, blank=True)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, models.SET_NULL, null=True,
                                     related_name="+")
    token = models.ForeignKey(ApiToken, models.SET_NULL, null=True, blank=True, related_name="+")
    warnings = models.JSONField(default=list, blank=True)
    # what applied
    isolation = models.JSONField(default=dict, blank=True)
    # lifecycle and outputs
    state = models.CharField(max_length=12, choices=RunState.choices, default=RunState.QUEUED,
                             db_index=True)
    reason = models.CharField(max_length=40, blank=True)
    message = models.TextField(blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    # Set before the agent signals the container, so the end it records says why,
    # even if the agent restarts between the signal and the exit.
    stop_reason = models.CharField(max_length=40, blank=True)
    stop_requested_by = models.CharField(max_length=150, blank=True)
    stop_signalled_at = models.DateTimeField(null=True, blank=True)
    log_entries = models.PositiveIntegerField(default=0)
    log_bytes = models.PositiveBigIntegerField(default=0)
    # timings
    queued_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    hydrated_at = models.DateTimeField(null=True, blank=True)
    setup_done_at = models.DateTimeField(null=True, blank=True)
    process_started_at = models.DateTimeField(null=True, blank=True)
    ready_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-queued_at", "-id"]
        indexes = [models.Index(fields=["workspace", "-queued_at"])]

    def __str__(self) -> str:
        return f"run {self.public_id} ({self.state})"

    @property
    def is_active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def container_name(self) -> str:
        """Unique per run and per instance: a redelivered task finds its own container."""
        return f"berth-{settings.BERTH_INSTANCE}-run-{self.public_id}"

    @property
    def timeout_s(self) -> int:
        return int(self.limits.get("timeout_s", 600))

    def advance(self, to: str, from_states: tuple[str, ...], **fields: object) -> bool:
        """Move to state `to` only from one of `from_states`; True if this call did it.

        A conditional UPDATE, so two processes racing (the agent seeing an exit, a
        cancel, a reconcile) can never both write an end.
        """
        updated = Run.objects.filter(pk=self.pk, state__in=from_states).update(state=to,
                                                                                **fields)
        if updated:
            self.refresh_from_db()
        return bool(updated)

    def finish(self, state: str, reason: str, message: str, exit_code: int | None = None,
               **fields: object) -> bool:
        """Write the one terminal state of this run (no-op if it already has one)."""
        assert state in TERMINAL_STATES
        ended = self.advance(state, ACTIVE_STATES, reason=reason, message=message,
                             exit_code=exit_code, finished_at=timezone.now(), **fields)
        if ended:
            # Whoever wrote the end (agent, task, cancel, reconcile), log watchers hear
            # of it: they re-read the run and send `end`.
            from runner import logstore

            public_id = self.public_id
            transaction.on_commit(lambda: logstore.signal(public_id, logstore.count(public_id)))
        return ended
