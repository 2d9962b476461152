import logging
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, models, transaction
from django.dispatch import Signal
from django.utils import timezone

from accounts.models import ApiToken
from core.ids import new_id
from logs import logstore
from sandbox import actions as sandboxes
from workspaces.models import Workspace

# Sent after the commit that wrote a service run's end (kwargs: run).
run_finished = Signal()


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


class Purpose(models.TextChoices):
    RUN = "run"  # a command, to its end
    # Servers another app owns: no wall-clock timeout, no outputs read back; its
    # Preview follows the run's end.
    PREVIEW = "preview"
    RELEASE = "release"
    # A release build: source in /app of a writable root layer, committed to
    # `output_image` when it succeeds; its DeployRequest follows the run's end.
    BUILD = "build"
    SESSION = "session"  # a session's container, one run per start (sessions.models)


# A run's sandboxes are owned under this kind (sandbox.models.Sandbox.owner_kind).
OWNER = "run"

ACTIVE_STATES = (RunState.QUEUED, RunState.PREPARING, RunState.RUNNING)
# Long-lived servers another app owns: a preview's, a release's, a session's process.
SERVICE_PURPOSES = (Purpose.PREVIEW, Purpose.RELEASE, Purpose.SESSION)
TERMINAL_STATES = tuple(s for s in RunState if s not in ACTIVE_STATES)


class Run(models.Model):
    """One execution: what went in, what ran, what came out.

    Inputs are fixed when the run is asked for (a commit SHA, never a moving branch);
    outputs are written once, by whichever process sees the end first.
    """

    public_id = models.CharField(max_length=12, unique=True, default=new_id, editable=False)
    workspace = models.ForeignKey(Workspace, models.CASCADE, related_name="runs")
    purpose = models.CharField(
        max_length=10, choices=Purpose.choices, default=Purpose.RUN, db_index=True
    )
    output_image = models.CharField(max_length=200, blank=True)
    output_labels = models.JSONField(default=dict, blank=True)  # e.g. the deploy it is for
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
    secret_names = models.JSONField(default=list, blank=True)
    # The granted values as the container got them, encrypted like Secret values: what
    # the log and outputs are masked with, even if a secret changes during the run.
    secrets_sealed = models.TextField(blank=True)
    # From workspace.toml at the commit, recorded so a replay needs nothing else:
    # {"command", "cache_key": [paths], "key": hash of those files + image id, "hit"}.
    setup = models.JSONField(default=dict, blank=True)
    artifact_paths = models.JSONField(default=list, blank=True)
    commit_changes = models.BooleanField(default=False)
    rerun_of = models.ForeignKey(
        "self", models.SET_NULL, null=True, blank=True, related_name="reruns"
    )
    # The approved sandbox contract it ran under (workspaces.reviews); none: it asked
    # for no more than the defaults, before any contract was approved.
    contract_review = models.ForeignKey(
        "workspaces.ContractReview", models.SET_NULL, null=True, blank=True, related_name="runs"
    )
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.SET_NULL, null=True, related_name="+"
    )
    token = models.ForeignKey(ApiToken, models.SET_NULL, null=True, blank=True, related_name="+")
    warnings = models.JSONField(default=list, blank=True)
    # what applied
    isolation = models.JSONField(default=dict, blank=True)
    # Its main sandbox (the command, a service's process, a build): made when a worker
    # prepares it. A setup step's sandbox is the run's too (runs.prepare.sandboxes_of).
    sandbox = models.ForeignKey(
        "sandbox.Sandbox", models.SET_NULL, null=True, blank=True, related_name="+"
    )
    # A volume kept past the run at /workspace (a session's): its source goes in once.
    workspace_volume = models.CharField(max_length=200, blank=True)
    # lifecycle and outputs
    state = models.CharField(
        max_length=12, choices=RunState.choices, default=RunState.QUEUED, db_index=True
    )
    reason = models.CharField(max_length=40, blank=True)
    message = models.TextField(blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    # A stop asked of the run (a cancel, its preview stopped), also asked of its
    # sandboxes (sandbox.models.Sandbox.stop_reason says which stop came first there).
    stop_reason = models.CharField(max_length=40, blank=True)
    stop_requested_by = models.CharField(max_length=150, blank=True)
    # Which container the run is in: "setup" (fills /deps) or "main" (the command).
    phase = models.CharField(max_length=8, blank=True)
    artifacts = models.JSONField(default=list, blank=True)  # [{path, size, sha256}]
    artifacts_refused = models.JSONField(default=list, blank=True)  # [{path, why}]
    changes = models.JSONField(null=True, blank=True)  # see runs.outputs
    changes_commit = models.CharField(max_length=40, blank=True)
    outputs_expired_at = models.DateTimeField(null=True, blank=True)
    # Egress through the run's proxy (sandbox.egress): when it was offered, and totals
    # over every connection tried (EgressEvent keeps the first EGRESS_MAX_EVENTS).
    egress_offered_at = models.DateTimeField(null=True, blank=True)
    egress_connections = models.PositiveIntegerField(default=0)
    egress_denied = models.PositiveIntegerField(default=0)
    egress_bytes_up = models.PositiveBigIntegerField(default=0)
    egress_bytes_down = models.PositiveBigIntegerField(default=0)
    network_failure = models.JSONField(null=True, blank=True)  # runs.network_failure
    # Env values wait here, encrypted like secrets_sealed, from the request until the
    # run ends (cleared then): a run may wait in the queue for admission, long after any
    # task message could have carried them.
    env_sealed = models.TextField(blank=True)
    # CPU time the runner agent last read from the container's cgroup while it ran, per
    # container ("setup", "main"; the cgroup is gone after exit); cpu_seconds sums them.
    cpu_seconds = models.FloatField(default=0)
    cpu_by_phase = models.JSONField(default=dict, blank=True)
    log_entries = models.PositiveIntegerField(default=0)
    log_bytes = models.PositiveBigIntegerField(default=0)
    # timings
    queued_at = models.DateTimeField(default=timezone.now)
    # When runs.quotas let it go on to a worker (runs wait in `queued` until then).
    admitted_at = models.DateTimeField(null=True, blank=True, db_index=True)
    # The host it was placed on at admission (sandbox.placement): its sandboxes, its
    # prepare task's queue and its agent are that host's. Empty while it waits.
    runner_host = models.CharField(max_length=40, blank=True, db_index=True)
    # When its prepare task last reached the broker. Null on an admitted run: the broker
    # was unreachable when it was sent (the row was committed all the same), so the
    # runner agent sends it again (runs.tasks.undelivered_runs).
    prepare_sent_at = models.DateTimeField(null=True, blank=True)
    # Until when a delivery of its prepare task holds it (runs.lease): another delivery
    # meanwhile leaves it alone rather than make its container a second time.
    prepare_lease_until = models.DateTimeField(null=True, blank=True)
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
        """The engine's name of its main sandbox (empty before a worker made it)."""
        return self.sandbox.name if self.sandbox is not None else ""

    @property
    def deps_volume_name(self) -> str:
        """The /deps volume this run fills (a miss) — each builder its own, so two runs
        building one key never write into the same volume."""
        return f"berth-{settings.BERTH_INSTANCE}-deps-{self.public_id}"

    @property
    def changes_branch(self) -> str:
        return f"runs/{self.public_id}"

    @property
    def timeout_s(self) -> int:
        return int(self.limits.get("timeout_s", 600))

    @property
    def is_service(self) -> bool:
        """A long-lived server (a preview's process), not a command run to its end."""
        return self.purpose in SERVICE_PURPOSES

    def advance(self, to: str, from_states: tuple[str, ...], **fields: object) -> bool:
        """Move to state `to` only from one of `from_states`; True if this call did it.

        A conditional UPDATE, so two processes racing (the agent seeing an exit, a
        cancel, a reconcile) can never both write an end.
        """
        updated = Run.objects.filter(pk=self.pk, state__in=from_states).update(state=to, **fields)
        if updated:
            # The run's own values, read again; the related rows it was loaded with
            # (an update of a run never changes which they are) are kept, not looked
            # up again by whoever goes on with this instance.
            self.refresh_from_db(
                fields=[f.attname for f in Run._meta.concrete_fields if not f.is_relation]
            )
        return bool(updated)

    def finish(
        self, state: str, reason: str, message: str, exit_code: int | None = None, **fields: object
    ) -> bool:
        """Write the one terminal state of this run (no-op if it already has one)."""
        assert state in TERMINAL_STATES
        ended = self.advance(
            state,
            ACTIVE_STATES,
            reason=reason,
            message=message,
            exit_code=exit_code,
            finished_at=timezone.now(),
            env_sealed="",
            **fields,
        )
        if ended:
            # Whoever wrote the end (agent, task, cancel, reconcile), log watchers hear
            # of it: they re-read the run and send `end`.
            # The seq of a signal is a hint (readers read the files): no call to the web
            # host here, where a runner host's failure would skip what follows.
            public_id, seq = self.public_id, self.log_entries or 0
            transaction.on_commit(lambda: logstore.signal(public_id, seq, ended=True))
            # Whoever owns a service or build run (a preview, a deploy) moves its own
            # state on from here.
            if self.purpose != Purpose.RUN:
                transaction.on_commit(lambda: _announce_end(self))
            else:
                # A slot is free: the next run that waits for one may go.
                from runs import quotas  # not at the top: runs.quotas imports this module

                transaction.on_commit(quotas.admit)
        return ended

    # Field changes that are not state transitions: each in one place, here.

    def ask_to_stop(self, reason: str, who: str) -> None:
        """Ask for its end (a cancel, its owner stopping a service): the first reason
        asked stays; its sandboxes are asked too, and the engine loop stops them."""
        Run.objects.filter(pk=self.pk, state__in=ACTIVE_STATES, stop_reason="").update(
            stop_reason=reason, stop_requested_by=who
        )
        sandboxes.request_stop(OWNER, self.public_id, reason, who)
        self.refresh_from_db()

    def attach_sandbox(self, sandbox: object) -> None:
        Run.objects.filter(pk=self.pk).update(sandbox=sandbox)

    def record_hydrated(
        self, image_id: str, isolation: dict[str, Any], setup: dict[str, Any], in_setup: bool
    ) -> None:
        """Its source is in and its containers made: what applied, and which runs first."""
        now = timezone.now()
        Run.objects.filter(pk=self.pk).update(
            image_id=image_id,
            hydrated_at=now,
            isolation=isolation,
            setup=setup,
            phase="setup" if in_setup else "main",
            setup_done_at=now if setup.get("hit") else None,
        )

    def enter_command(self, setup: dict[str, Any]) -> None:
        """Its setup step succeeded: the command runs from now."""
        now = timezone.now()
        Run.objects.filter(pk=self.pk).update(
            phase="main", setup_done_at=now, process_started_at=now, setup=setup
        )

    @staticmethod
    def admit(pk: int, at: datetime, host: str, sealed: tuple[str, str]) -> bool:
        """Let a queued run go on to `host`'s worker (runs.quotas.admit, under its lock),
        with its values sealed for that host (`env_sealed`, `secrets_sealed`: runs.secrets
        .placed); True if this call did."""
        return bool(
            Run.objects.filter(pk=pk, state=RunState.QUEUED, admitted_at=None).update(
                admitted_at=at, runner_host=host, env_sealed=sealed[0], secrets_sealed=sealed[1]
            )
        )

    def lease_prepare(self, lease: timedelta) -> bool:
        """This delivery of the prepare task holds the run for `lease` (runs.lease),
        unless another holds it now."""
        now = timezone.now()
        return bool(
            Run.objects.filter(pk=self.pk)
            .filter(
                models.Q(prepare_lease_until__isnull=True) | models.Q(prepare_lease_until__lt=now)
            )
            .update(prepare_lease_until=now + lease)
        )

    @staticmethod
    def mark_prepare_sent(pk: int) -> None:
        Run.objects.filter(pk=pk).update(prepare_sent_at=timezone.now())

    def record_changes_commit(self, sha: str) -> None:
        Run.objects.filter(pk=self.pk).update(changes_commit=sha)
        self.changes_commit = sha

    def expire_outputs(self) -> None:
        Run.objects.filter(pk=self.pk).update(outputs_expired_at=timezone.now())

    def record_cpu(self, phase: str, used: float) -> None:
        """CPU time its `phase` container used so far; cpu_seconds sums the phases."""
        by_phase = {**self.cpu_by_phase, phase: round(used, 3)}
        total = round(sum(by_phase.values()), 3)
        Run.objects.filter(pk=self.pk).update(cpu_by_phase=by_phase, cpu_seconds=total)
        self.cpu_by_phase = by_phase

    @staticmethod
    def mark_egress_offered(public_id: str) -> None:
        Run.objects.filter(public_id=public_id, egress_offered_at=None).update(
            egress_offered_at=timezone.now()
        )


def _announce_end(run: Run) -> None:
    """The owner's failure to follow is logged, never allowed to undo or block the end."""
    for receiver, result in run_finished.send_robust(Run, run=run):
        if isinstance(result, Exception):
            logging.getLogger(__name__).error(
                "%s failed after run %s ended: %r", receiver, run.public_id, result
            )


class EgressEvent(models.Model):
    """One connection a sandbox asked its egress proxy for: refused (and why), or
    made, with its bytes each way and why it ended early, if it did."""

    run = models.ForeignKey(Run, models.CASCADE, related_name="egress_events")
    phase = models.CharField(max_length=8, blank=True)  # "setup" or "main"
    method = models.CharField(max_length=16)  # CONNECT, or the plain HTTP request's
    host = models.CharField(max_length=255)
    port = models.PositiveIntegerField()
    address = models.CharField(max_length=45, blank=True)
    allowed = models.BooleanField()
    # not_allowed, address_not_allowed, resolve_failed, connect_failed, connection_cap,
    # byte_cap (refused or cut), idle_timeout, bad_upstream; sandbox_, team_ and
    # agent_connection_cap (refused at the proxy's door: method and host empty);
    # refusal_flood (`count` connections past a cap closed unanswered in one second,
    # past EGRESS_MAX_REFUSALS_PER_S); empty for a normal end
    reason = models.CharField(max_length=24, blank=True)
    bytes_up = models.PositiveBigIntegerField(default=0)
    bytes_down = models.PositiveBigIntegerField(default=0)
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    count = models.PositiveIntegerField(default=1)  # connections this record stands for

    class Meta:
        ordering = ["started_at", "id"]

    def __str__(self) -> str:
        return f"{'allowed' if self.allowed else 'denied'} {self.host}:{self.port}"

    @property
    def kind(self) -> str:
        """What the API and pages call it: `egress_denied` for a refusal."""
        return "egress_allowed" if self.allowed else "egress_denied"

    @classmethod
    def record(cls, run_pk: int, events: list["EgressEvent"]) -> None:
        """Count them on the run; keep the rows while the run has fewer than the cap."""
        allowed = sum(e.count for e in events if e.allowed)
        denied = sum(e.count for e in events if not e.allowed)
        Run.objects.filter(pk=run_pk).update(
            egress_connections=models.F("egress_connections") + allowed,
            egress_denied=models.F("egress_denied") + denied,
            egress_bytes_up=models.F("egress_bytes_up") + sum(e.bytes_up for e in events),
            egress_bytes_down=models.F("egress_bytes_down") + sum(e.bytes_down for e in events),
        )
        room = settings.EGRESS_MAX_EVENTS - cls.objects.filter(run_id=run_pk).count()
        if room > 0:
            EgressEvent.objects.bulk_create(events[:room])

    def as_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "phase": self.phase,
            "method": self.method,
            "host": self.host,
            "port": self.port,
            "address": self.address,
            "reason": self.reason,
            "bytes_up": self.bytes_up,
            "bytes_down": self.bytes_down,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "count": self.count,
        }


class Secret(models.Model):
    """A workspace secret: the value is encrypted at rest (runs.secrets) and never
    shown again after it is set; runs get it only when their request names it."""

    workspace = models.ForeignKey(Workspace, models.CASCADE, related_name="secrets")
    name = models.CharField(max_length=64)
    ciphertext = models.TextField()
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint("workspace", "name", name="one_secret_per_name")]
        ordering = ["name"]

    def __str__(self) -> str:
        return f"secret {self.name} of {self.workspace}"


class AdmissionLock(models.Model):
    """One row, locked by every admission (runs.quotas.admit), so two processes
    freeing slots at once never admit past a limit (SQLite's IMMEDIATE transactions
    serialise them anyway; PostgreSQL needs the row lock)."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)

    def __str__(self) -> str:
        return "admission lock"

    @staticmethod
    def take() -> None:
        """Lock the row for the caller's transaction (made at the first admission)."""
        AdmissionLock.objects.select_for_update().get_or_create(id=1)


class TeamCpuDay(models.Model):
    """CPU-seconds a team's containers used on one UTC day: the runner agent adds what
    each sample grew by since the last, so a long-lived process counts on each day only
    what it used that day (runs.quotas reads today's row)."""

    team = models.ForeignKey("accounts.Team", models.CASCADE, related_name="+")
    day = models.DateField()
    seconds = models.FloatField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint("team", "day", name="one_cpu_row_per_day")]

    def __str__(self) -> str:
        return f"{self.team_id} {self.day}: {self.seconds:.0f} s"

    @classmethod
    def add(cls, team_id: int, seconds: float) -> None:
        day = timezone.now().date()
        if cls.objects.filter(team_id=team_id, day=day).update(
            seconds=models.F("seconds") + seconds
        ):
            return
        try:
            with transaction.atomic():
                cls.objects.create(team_id=team_id, day=day, seconds=seconds)
        except IntegrityError:  # created meanwhile by another sample
            cls.objects.filter(team_id=team_id, day=day).update(
                seconds=models.F("seconds") + seconds
            )


# Dependency caches' rows: their own module, one model.
from runs.depcache import DepCache  # noqa: E402, F401
