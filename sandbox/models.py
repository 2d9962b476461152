"""The sandbox layer's own state: one row per container it manages (docs/architecture.md).

The engine loop (sandbox.loop) reads and writes these rows alone; what a sandbox is for
lives with its owner (a run, and through it a preview's process or a release build),
named by `owner_kind` and `owner_id` and told of starts and ends through the handlers
the owner registers (sandbox.owners).
"""

from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from core.ids import new_id


class SandboxKind(models.TextChoices):
    RUN = "run"  # a command, to its end
    SETUP = "setup"  # a run's setup step, filling the dependency cache
    SERVICE = "service"  # a long-lived server: a preview's or a release's process
    BUILD = "build"  # a release build: its writable root layer becomes an image
    SESSION = "session"  # a session's: kept between an agent's turns, execs inside it


class SandboxState(models.TextChoices):
    CREATED = "created"
    RUNNING = "running"
    EXITED = "exited"
    REMOVED = "removed"


# States whose container the engine still holds (or is about to).
LIVE_STATES = (SandboxState.CREATED, SandboxState.RUNNING, SandboxState.EXITED)


def this_host() -> str:
    """The host whose engine holds a new sandbox: one value until there are several."""
    return str(settings.SANDBOX_HOST)


class Sandbox(models.Model):
    public_id = models.CharField(max_length=12, unique=True, default=new_id, editable=False)
    # The engine's name for the container, and for its /workspace volume. From the id
    # for a new sandbox; a container made before this row existed kept its name.
    name = models.CharField(max_length=200, unique=True)
    host = models.CharField(max_length=100, default=this_host)
    kind = models.CharField(max_length=10, choices=SandboxKind.choices)
    owner_kind = models.CharField(max_length=20)
    owner_id = models.CharField(max_length=40)
    # Whose budget it counts against (egress connections per team).
    team_id = models.IntegerField(null=True, blank=True)
    image = models.CharField(max_length=200)
    image_id = models.CharField(max_length=100, blank=True)
    runtime = models.CharField(max_length=10, default="runc")
    # Where its source is: /workspace, a volume of its own; or /app, in its image (a
    # release build and a release's process), with no /workspace at all.
    workdir = models.CharField(max_length=20, default="/workspace")
    limits = models.JSONField(default=dict)
    network = models.JSONField(default=dict)
    # Volumes it writes besides its own /workspace (a setup step's /deps and the run's
    # /workspace): what the disk watch counts.
    volumes = models.JSONField(default=list, blank=True)
    # Past it the engine loop stops the sandbox ("timeout"); none for a service.
    deadline = models.DateTimeField(null=True, blank=True)
    # Set before the loop signals the container, so the end says why even if the agent
    # restarts between the signal and the exit.
    stop_reason = models.CharField(max_length=40, blank=True)
    stop_requested_by = models.CharField(max_length=150, blank=True)
    stop_signalled_at = models.DateTimeField(null=True, blank=True)
    # Frozen by the engine (`docker pause`), as its events last said: Docker can thaw a
    # container by itself, so this follows the engine, never what was asked.
    paused = models.BooleanField(default=False)
    # The host pid of its init and the inode of its network namespace, once running.
    pid = models.IntegerField(null=True, blank=True)
    netns = models.BigIntegerField(null=True, blank=True)
    # When the runner agent handed a session's exec channel its key, recorded before it
    # did: a sandbox keyed once is never keyed again (sessions.channel).
    channel_keyed_at = models.DateTimeField(null=True, blank=True)
    # Its command runs behind the image's output wrapper, whose frames the agent splits
    # back into lines (logs.follow); otherwise the engine's messages are the lines.
    output_framed = models.BooleanField(default=False)
    state = models.CharField(
        max_length=10, choices=SandboxState.choices, default=SandboxState.CREATED, db_index=True
    )
    exit_code = models.IntegerField(null=True, blank=True)
    oom_killed = models.BooleanField(default=False)
    # CPU time last read from its cgroup while it ran (the cgroup goes with it).
    cpu_seconds = models.FloatField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    exited_at = models.DateTimeField(null=True, blank=True)
    removed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["owner_kind", "owner_id"])]
        constraints = [
            # One of each kind per owner: a redelivered task finds the sandbox it made.
            models.UniqueConstraint(
                fields=["owner_kind", "owner_id", "kind"], name="one_sandbox_per_owner_kind"
            )
        ]

    def __str__(self) -> str:
        return f"sandbox {self.public_id} ({self.kind} of {self.owner_kind} {self.owner_id})"

    @staticmethod
    def engine_name(public_id: str) -> str:
        return f"berth-{settings.BERTH_INSTANCE}-sb-{public_id}"

    @property
    def labels(self) -> dict[str, str]:
        """What the engine keeps on the container and its volume: enough to find the row
        again (by name too), and to list this instance's sandboxes alone."""
        return {
            "berth.instance": settings.BERTH_INSTANCE,
            "berth.kind": "sandbox",
            "berth.sandbox": self.public_id,
            "berth.owner": self.owner_id,
        }

    @property
    def is_live(self) -> bool:
        return self.state in LIVE_STATES

    def _move(self, from_states: tuple[str, ...], **fields: Any) -> bool:
        """A conditional update: only from one of `from_states`; True if this call did it."""
        done = Sandbox.objects.filter(pk=self.pk, state__in=from_states).update(**fields)
        if done:
            for name, value in fields.items():
                setattr(self, name, value)
        return bool(done)

    def mark_running(self, at: datetime | None = None) -> bool:
        return self._move(
            (SandboxState.CREATED,),
            state=SandboxState.RUNNING,
            started_at=at or timezone.now(),
        )

    def mark_exited(self, exit_code: int | None, oom_killed: bool) -> bool:
        return self._move(
            (SandboxState.CREATED, SandboxState.RUNNING),
            state=SandboxState.EXITED,
            exit_code=exit_code,
            oom_killed=bool(oom_killed),
            exited_at=timezone.now(),
        )

    def mark_removed(self) -> bool:
        return self._move(LIVE_STATES, state=SandboxState.REMOVED, removed_at=timezone.now())

    def mark_channel_keyed(self) -> bool:
        """True for the one call that may hand its exec channel a key: never twice."""
        now = timezone.now()
        done = Sandbox.objects.filter(pk=self.pk, channel_keyed_at=None).update(
            channel_keyed_at=now
        )
        if done:
            self.channel_keyed_at = now
        return bool(done)

    def request_stop(self, reason: str, by: str = "") -> bool:
        """Ask the engine loop to stop it; a stop asked for before keeps its reason."""
        done = Sandbox.objects.filter(pk=self.pk, stop_reason="").update(
            stop_reason=reason, stop_requested_by=by
        )
        self.refresh_from_db(fields=["stop_reason", "stop_requested_by"])
        return bool(done)

    def mark_signalled(self) -> None:
        Sandbox.objects.filter(pk=self.pk, stop_signalled_at=None).update(
            stop_signalled_at=timezone.now()
        )
        self.refresh_from_db(fields=["stop_signalled_at"])

    def mark_paused(self, paused: bool) -> bool:
        """As the engine reported it; True if that changed the row."""
        done = Sandbox.objects.filter(pk=self.pk).exclude(paused=paused).update(paused=paused)
        self.paused = paused
        return bool(done)

    def record_image(self, image_id: str) -> None:
        """The image's exact id, checked before the container is made from it."""
        Sandbox.objects.filter(pk=self.pk).update(image_id=image_id)
        self.image_id = image_id

    def record_output_framed(self, framed: bool) -> None:
        """Whether its command's output reaches the engine framed (sandbox.docker)."""
        Sandbox.objects.filter(pk=self.pk).update(output_framed=framed)
        self.output_framed = framed

    def record_cpu(self, used: float) -> None:
        """CPU time its cgroup said it used so far (the owner counts what it grew by)."""
        Sandbox.objects.filter(pk=self.pk).update(cpu_seconds=round(used, 3))
        self.cpu_seconds = round(used, 3)

    def record_pid(self, pid: int, netns: int | None) -> None:
        Sandbox.objects.filter(pk=self.pk).update(pid=pid, netns=netns)
        self.pid, self.netns = pid, netns


# The machines sandboxes run on: their own module, one model each.
from sandbox.hosts import Host, HostState  # noqa: E402, F401
