"""A session: a sandbox kept alive between an agent's turns (docs/sessions.md).

Its container is the process of a Run of purpose "session" (runs.services), one Run per
start: the same contract, hardening, limits, egress and setup as any run. Its
/workspace is a volume of its own, kept through freeze and stop until the session is
deleted. Commands in it are Execs, each started by the exec channel inside the sandbox
(sandbox/in_image/berth_session.py) and logged in the same store as a run's.
"""

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import models, transaction
from django.utils import timezone

from accounts.models import ApiToken, Team
from core.ids import new_id
from runs import secrets
from runs.models import Run
from sessions.signals import announce_grant
from workspaces.models import Workspace


class SessionState(models.TextChoices):
    STARTING = "starting"
    READY = "ready"
    FREEZING = "freezing"  # asked to pause; frozen once the engine says it is
    FROZEN = "frozen"
    STOPPING = "stopping"
    STOPPED = "stopped"  # its files kept on the volume; a start brings it back
    DELETED = "deleted"  # its files gone; the record stays
    FAILED = "failed"  # never became ready, or its process ended on its own
    LOST = "lost"  # its container disappeared (the engine restarted, removed by hand)


# A container holds it (or is about to): counted against the team's limit.
LIVE_STATES = (
    SessionState.STARTING,
    SessionState.READY,
    SessionState.FREEZING,
    SessionState.FROZEN,
    SessionState.STOPPING,
)
# Its volume is kept: it can start again.
RESTARTABLE_STATES = (SessionState.STOPPED, SessionState.FAILED, SessionState.LOST)


class Timers(models.Model):
    """The four numbers of a session, each at most its team's maximum."""

    idle_freeze_s = models.PositiveIntegerField()
    idle_stop_s = models.PositiveIntegerField()
    lifetime_s = models.PositiveIntegerField()
    retention_s = models.PositiveIntegerField()

    class Meta:
        abstract = True


class SessionPolicy(Timers):
    """A team's maxima, set by an admin; the settings' defaults when it has none."""

    team = models.OneToOneField(Team, models.CASCADE, related_name="session_policy")
    max_sessions = models.PositiveIntegerField()

    def __str__(self) -> str:
        return f"session policy of team {self.team_id}"

    @staticmethod
    def defaults() -> dict[str, int]:
        return {
            "max_sessions": settings.SESSION_MAX_PER_TEAM,
            "idle_freeze_s": settings.SESSION_IDLE_FREEZE_S,
            "idle_stop_s": settings.SESSION_IDLE_STOP_S,
            "lifetime_s": settings.SESSION_LIFETIME_S,
            "retention_s": settings.SESSION_RETENTION_S,
        }

    @classmethod
    def of(cls, team: Team) -> dict[str, int]:
        found = cls.objects.filter(team=team).values(*cls.defaults()).first()
        return found or cls.defaults()


class Session(Timers):
    public_id = models.CharField(max_length=12, unique=True, default=new_id, editable=False)
    workspace = models.ForeignKey(Workspace, models.CASCADE, related_name="sessions")
    ref = models.CharField(max_length=200)  # the branch it follows
    # The branch's commit its files were last brought to (at start, or by a write).
    base_commit = models.CharField(max_length=40)
    runtime = models.CharField(max_length=10)  # as asked; its run says what applied
    run = models.ForeignKey(Run, models.SET_NULL, null=True, blank=True, related_name="+")
    # The host its volume is on, from its first placement: every start goes there (on
    # another host an empty volume would be refilled from the commit, losing what was
    # not committed).
    runner_host = models.CharField(max_length=40, blank=True)
    starts = models.PositiveIntegerField(default=0)
    state = models.CharField(
        max_length=10, choices=SessionState.choices, default=SessionState.STARTING, db_index=True
    )
    reason = models.CharField(max_length=40, blank=True)
    message = models.TextField(blank=True)
    # Why a stop was asked for (closed, idle, lifetime): its end says so.
    stop_reason = models.CharField(max_length=40, blank=True)
    stop_requested_by = models.CharField(max_length=150, blank=True)
    # Secret names any of its execs was granted: from then on its execs, output and
    # changes are for those whose grants cover them (sessions.access).
    secret_names = models.JSONField(default=list, blank=True)
    # Their values, sealed for its host (runs.secrets.seal_for): what its agent masks
    # in its execs' output, terminals and reads.
    secrets_sealed = models.TextField(blank=True)
    # A file of the dependency cache's key changed since it started: /deps is stale.
    deps_stale = models.BooleanField(default=False)
    # Files a sync left as the session had them (it had changed them too), each with the
    # version its own was based on ({mode, sha}, None: absent): a commit of the
    # session's changes merges them from that base, so it never silently undoes the
    # branch's change.
    sync_conflicts = models.JSONField(default=dict, blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.SET_NULL, null=True, related_name="+"
    )
    token = models.ForeignKey(ApiToken, models.SET_NULL, null=True, blank=True, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)  # this start's
    ready_at = models.DateTimeField(null=True, blank=True)
    last_active_at = models.DateTimeField(default=timezone.now)
    frozen_at = models.DateTimeField(null=True, blank=True)
    stopped_at = models.DateTimeField(null=True, blank=True)
    deleted_at = models.DateTimeField(null=True, blank=True)
    # A resume asked for (keep_alive on a frozen session): the agent unpauses it.
    resume_requested_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["workspace", "ref", "state"])]

    def __str__(self) -> str:
        return f"session {self.public_id} of {self.workspace} ({self.state})"

    @property
    def volume(self) -> str:
        """The engine's name for its /workspace volume."""
        return f"berth-{settings.BERTH_INSTANCE}-session-{self.public_id}"

    @property
    def is_live(self) -> bool:
        return self.state in LIVE_STATES

    @property
    def is_deleted(self) -> bool:
        return self.state == SessionState.DELETED

    @property
    def expires_at(self) -> datetime | None:
        """Past it a live session is stopped (its maximum lifetime, from this start)."""
        return self.started_at + timedelta(seconds=self.lifetime_s) if self.started_at else None

    @property
    def deleted_after(self) -> datetime | None:
        """A stopped session's files go then (retention)."""
        return self.stopped_at + timedelta(seconds=self.retention_s) if self.stopped_at else None

    def move(self, to: str, from_states: tuple[str, ...], **fields: Any) -> bool:
        """A conditional UPDATE: the agent, a worker and a user racing can never both
        write one transition."""
        return self.move_if(to, from_states, {}, **fields)

    def move_if(
        self, to: str, from_states: tuple[str, ...], expect: dict[str, Any], **fields: Any
    ) -> bool:
        """`move`, only while `expect`'s fields still hold what was read (the stop asked,
        which decides how it ends)."""
        done = Session.objects.filter(pk=self.pk, state__in=from_states, **expect).update(
            state=to, **fields
        )
        if done:
            # What was written, without a reload (that would drop the run it holds).
            for name, value in {"state": to, **fields}.items():
                setattr(self, name, value)
        return bool(done)

    # Field changes that are not transitions: each in one place, here.

    def touch(self) -> None:
        """Activity: its idle clock starts again."""
        now = timezone.now()
        Session.objects.filter(pk=self.pk, last_active_at__lt=now).update(last_active_at=now)
        self.last_active_at = now

    @staticmethod
    def touch_by_id(public_id: str) -> None:
        """Activity seen from outside (a request to a preview of it): as `touch`."""
        now = timezone.now()
        Session.objects.filter(public_id=public_id, last_active_at__lt=now).update(
            last_active_at=now
        )

    def ask_resume(self) -> None:
        Session.objects.filter(pk=self.pk).update(resume_requested_at=timezone.now())

    def grant(self, names: list[str]) -> bool:
        """Secrets one of its execs got: the session's outputs follow them from now on,
        masked with every value each had when an exec was granted it (a value changed
        since stays masked too: the earlier one may still be in its files and
        processes). True when a name or a value is new to it.
        Read under a row lock: two first grants at once both land, never one over
        the other. Its own atomic block, as the lock needs one whoever calls."""
        with transaction.atomic():
            held = Session.objects.select_for_update().values_list("secret_names", "secrets_sealed")
            current_names, sealed = held.get(pk=self.pk)
            current = set(current_names or [])
            masked = secrets.open_sealed(sealed)
            merged = secrets.with_values(masked, secrets.values_for(self.workspace_id, names))
            if not set(names) - current and merged == masked:
                return False
            self.secret_names = sorted(current | set(names))
            self.secrets_sealed = secrets.seal_for(self.runner_host, merged)
            Session.objects.filter(pk=self.pk).update(
                secret_names=self.secret_names, secrets_sealed=self.secrets_sealed
            )
            granted = list(self.secret_names)
            transaction.on_commit(lambda: announce_grant(self, granted))
            return True

    def record_base(self, commit: str) -> None:
        Session.objects.filter(pk=self.pk).update(base_commit=commit)
        self.base_commit = commit

    def mark_deps_stale(self) -> None:
        Session.objects.filter(pk=self.pk).update(deps_stale=True)
        self.deps_stale = True

    def record_sync(
        self, commit: str, conflicts: dict[str, dict[str, Any] | None], settled: list[str]
    ) -> None:
        """Its files were brought to `commit`: paths newly left in conflict keep the
        base their own version had (a conflict already recorded keeps its first one),
        and paths that now hold the branch's version are settled."""
        with transaction.atomic():
            row = Session.objects.select_for_update().get(pk=self.pk)
            kept = {p: b for p, b in row.sync_conflicts.items() if p not in settled}
            for path, base in conflicts.items():
                kept.setdefault(path, base)
            Session.objects.filter(pk=self.pk).update(base_commit=commit, sync_conflicts=kept)
        self.base_commit, self.sync_conflicts = commit, kept


class ExecState(models.TextChoices):
    QUEUED = "queued"  # recorded, not yet handed to the exec channel
    RUNNING = "running"
    ENDED = "ended"  # `reason` says how


class Exec(models.Model):
    """One command in a session: who asked, what, how it ended, and its log (the log
    store's files under its public id, as a run's)."""

    public_id = models.CharField(max_length=12, unique=True, default=new_id, editable=False)
    session = models.ForeignKey(Session, models.CASCADE, related_name="execs")
    command = models.TextField()
    cwd = models.CharField(max_length=500, default="/workspace")
    timeout_s = models.PositiveIntegerField()
    detach = models.BooleanField(default=False)
    env_names = models.JSONField(default=list, blank=True)
    secret_names = models.JSONField(default=list, blank=True)
    # Env and granted values, sealed as a run's, until it ends: the channel gets them in
    # this exec's environment alone, and its log is masked with the secret ones.
    env_sealed = models.TextField(blank=True)
    secrets_sealed = models.TextField(blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.SET_NULL, null=True, related_name="+"
    )
    token = models.ForeignKey(ApiToken, models.SET_NULL, null=True, blank=True, related_name="+")
    state = models.CharField(
        max_length=8, choices=ExecState.choices, default=ExecState.QUEUED, db_index=True
    )
    reason = models.CharField(max_length=40, blank=True)
    message = models.TextField(blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    signal = models.IntegerField(null=True, blank=True)
    pid = models.IntegerField(null=True, blank=True)
    log_entries = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    # A kill asked for: the agent signals its process group (SIGKILL when forced).
    kill_requested_at = models.DateTimeField(null=True, blank=True)
    kill_force = models.BooleanField(default=False)

    class Meta:
        ordering = ["-pk"]

    def __str__(self) -> str:
        return f"exec {self.public_id} in session {self.session_id} ({self.state})"

    @property
    def is_active(self) -> bool:
        return self.state != ExecState.ENDED

    def mark_running(self, pid: int | None = None) -> bool:
        done = Exec.objects.filter(pk=self.pk, state=ExecState.QUEUED).update(
            state=ExecState.RUNNING, started_at=timezone.now(), pid=pid
        )
        if done:
            self.refresh_from_db()
        return bool(done)

    def ask_kill(self, force: bool) -> None:
        Exec.objects.filter(pk=self.pk).update(kill_requested_at=timezone.now(), kill_force=force)

    def record_pid(self, pid: int) -> None:
        Exec.objects.filter(pk=self.pk).update(pid=pid)
        self.pid = pid

    def end_unstarted(self, reason: str, message: str) -> bool:
        """Its end while it is still queued only: never once the agent has started it."""
        done = Exec.objects.filter(pk=self.pk, state=ExecState.QUEUED).update(
            state=ExecState.ENDED,
            reason=reason,
            message=message,
            ended_at=timezone.now(),
            env_sealed="",
            secrets_sealed="",
        )
        if done:
            self.refresh_from_db()
        return bool(done)

    def finish(self, reason: str, message: str, **fields: Any) -> bool:
        """Its one end (no-op if it has one); its sealed values go with it."""
        done = Exec.objects.filter(pk=self.pk, state__in=(ExecState.QUEUED, ExecState.RUNNING))
        if not done.update(
            state=ExecState.ENDED,
            reason=reason,
            message=message,
            ended_at=timezone.now(),
            env_sealed="",
            secrets_sealed="",
            **fields,
        ):
            return False
        self.refresh_from_db()
        return True


class SyncState(models.TextChoices):
    PENDING = "pending"  # the session has not applied it yet
    APPLIED = "applied"
    CONFLICT = "conflict"  # applied but for `conflicts`, left as the session had them


class SessionSync(models.Model):
    """One commit a session is to be brought to (a write on its branch, or its branch's
    head at a start): the runner agent applies them in order, through the exec channel,
    before the session's next exec."""

    session = models.ForeignKey(Session, models.CASCADE, related_name="syncs")
    commit = models.CharField(max_length=40)
    state = models.CharField(
        max_length=8, choices=SyncState.choices, default=SyncState.PENDING, db_index=True
    )
    applied = models.PositiveIntegerField(default=0)  # files changed to the branch's version
    conflicts = models.JSONField(default=list, blank=True)  # [{path, why}]
    created_at = models.DateTimeField(default=timezone.now)
    done_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["pk"]

    def __str__(self) -> str:
        return f"sync of session {self.session_id} to {self.commit[:12]} ({self.state})"

    def finish(self, applied: int, conflicts: list[dict[str, str]]) -> bool:
        done = SessionSync.objects.filter(pk=self.pk, state=SyncState.PENDING).update(
            state=SyncState.CONFLICT if conflicts else SyncState.APPLIED,
            applied=applied,
            conflicts=conflicts,
            done_at=timezone.now(),
        )
        return bool(done)


class SnapshotState(models.TextChoices):
    PENDING = "pending"
    DONE = "done"
    FAILED = "failed"


class Snapshot(models.Model):
    """What a session's /workspace holds, as a Git tree the runner agent wrote into a
    scratch store of the read's own (sessions.snapstore; it sees the workspace's objects,
    and never adds to them): what its changes and its commit are read from. Asked for by
    a door, made by the agent (the one process that enters)."""

    session = models.ForeignKey(Session, models.CASCADE, related_name="snapshots")
    state = models.CharField(
        max_length=8, choices=SnapshotState.choices, default=SnapshotState.PENDING, db_index=True
    )
    base_commit = models.CharField(max_length=40, blank=True)  # the session's, when read
    tree = models.CharField(max_length=40, blank=True)
    # The scratch store holding the tree (sessions.snapstore names it); several rows
    # answered by one read share it.
    scratch = models.CharField(max_length=200, blank=True)
    skipped = models.JSONField(default=list, blank=True)  # [{path, why}]
    skipped_count = models.PositiveIntegerField(default=0)
    withheld = models.JSONField(default=list, blank=True)  # [{path, secrets}]
    error = models.TextField(blank=True)
    # Failed because the channel did not answer (busy, or the sandbox going): a door
    # says 503, try again, rather than 409 for a tree that cannot be read.
    unanswered = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)
    done_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["pk"]

    def __str__(self) -> str:
        return f"snapshot of session {self.session_id} ({self.state})"


class TerminalState(models.TextChoices):
    OPEN = "open"
    EXITED = "exited"  # its shell ended (exit, or hung up): its transcript stays
    CLOSED = "closed"  # closed by someone, or its session's container stopped


class Terminal(models.Model):
    """A shell on a pseudo-terminal in a session's container, held by the exec channel
    inside it (sandbox/in_image/berth_pty.py), for as long as that start's container
    lives. Its output is kept as a masked transcript under the data dir, with the
    session's retention (sessions/terminals.py)."""

    public_id = models.CharField(max_length=12, unique=True, default=new_id, editable=False)
    session = models.ForeignKey(Session, models.CASCADE, related_name="terminals")
    # The start it lives in: a later start of the session has none of its processes.
    run = models.ForeignKey(Run, models.SET_NULL, null=True, related_name="+")
    name = models.CharField(max_length=60)
    state = models.CharField(
        max_length=8, choices=TerminalState.choices, default=TerminalState.OPEN, db_index=True
    )
    reason = models.CharField(max_length=40, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    opened_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.SET_NULL, null=True, related_name="+"
    )
    token = models.ForeignKey(ApiToken, models.SET_NULL, null=True, blank=True, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["pk"]

    def __str__(self) -> str:
        return f"terminal {self.public_id} in session {self.session_id} ({self.state})"

    @property
    def is_open(self) -> bool:
        return self.state == TerminalState.OPEN

    def end(self, to: str, reason: str, exit_code: int | None = None) -> bool:
        """Open → exited or closed, once."""
        done = Terminal.objects.filter(pk=self.pk, state=TerminalState.OPEN).update(
            state=to, reason=reason, exit_code=exit_code, ended_at=timezone.now()
        )
        if done:
            self.state, self.reason, self.exit_code = to, reason, exit_code
        return bool(done)
