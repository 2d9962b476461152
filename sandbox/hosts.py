"""The machines that run sandboxes, one row each (docs/hosts.md).

A host is named by `BERTH_SANDBOX_HOST` (the value every Sandbox row of it carries in
`host`); `local` is the one machine of `make run`, made by the migration. Any other
host is added by an operator (`manage.py hosts add`), which shows its token once and
keeps only its hash. Its runner agent refuses to start on a name with no row, and
beats every HOST_HEARTBEAT_S seconds: what its engine has (version, runtimes with their
arguments, the images present, memory) and what the operator gave it (slots, labels,
its gateway's address). Placement (sandbox.placement) takes a ready host that has the
runtime; draining keeps its work running and gives it nothing new.
"""

import hashlib
import hmac
import secrets
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from core import keys

# A host silent this long shows as stale (it beats every HOST_HEARTBEAT_S).
STALE_AFTER_S = 30.0
TOKEN_PREFIX = "berth_host_"
# The one machine of `make run`: its row is made when first needed, any other host's by
# an operator (`manage.py hosts add`).
DEFAULT_HOST = "local"
# A host's name is a label value, a queue's suffix and a channel group's part.
NAME_PATTERN = r"^[a-z][a-z0-9-]{0,39}$"


class HostState(models.TextChoices):
    READY = "ready"  # takes new work
    DRAINING = "draining"  # keeps what it runs, takes nothing new
    LOST = "lost"  # silent past its bound; its work is ended elsewhere (part 3)


def _digest(secret: str) -> str:
    """Keyed like API tokens' (accounts.models): a leaked table leaks no usable token."""
    return hmac.new(settings.SECRET_KEY.encode(), secret.encode(), hashlib.sha256).hexdigest()


class Host(models.Model):
    name = models.CharField(max_length=40, unique=True)
    state = models.CharField(max_length=10, choices=HostState.choices, default=HostState.READY)
    # What the agent's last beat said of its engine.
    engine_version = models.CharField(max_length=40, blank=True)
    # The engine's own ID: two agents beating one name from two engines (a second host
    # left named `local`) are told apart, and the second refuses to start.
    engine_id = models.CharField(max_length=100, blank=True)
    # {"runc": [], "runsc": ["--oci-seccomp", ...]}: each runtime with its arguments.
    runtimes = models.JSONField(default=dict, blank=True)
    images = models.JSONField(default=list, blank=True)  # ids of this instance's images
    memory_bytes = models.BigIntegerField(default=0)
    # Set by the agent from its settings (HOST_SLOTS, HOST_LABELS, its gateway).
    slots = models.PositiveIntegerField(default=0)
    labels = models.JSONField(default=dict, blank=True)
    gateway_address = models.CharField(max_length=200, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    added_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"host {self.name} ({self.state})"

    @property
    def has_gvisor(self) -> bool:
        """gVisor as Berth needs it: runsc that applies the container's seccomp filter
        too (without `--oci-seccomp` it ignores it, so a sandbox would run without)."""
        return "--oci-seccomp" in (self.runtimes.get("runsc") or [])

    def has_runtime(self, runtime: str) -> bool:
        return self.has_gvisor if runtime == "runsc" else runtime in self.runtimes

    def fresh(self, now: datetime | None = None) -> bool:
        """Beat within STALE_AFTER_S."""
        if self.heartbeat_at is None:
            return False
        return (now or timezone.now()) - self.heartbeat_at <= timedelta(seconds=STALE_AFTER_S)

    def issue_token(self) -> str:
        """A new token for this host; the plaintext is returned once and never kept."""
        secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
        self.keep_token(secret)
        return secret

    def keep_token(self, secret: str) -> None:
        """`secret` is this host's token from now on (its digest kept, in place of any
        other): a new one, or the one the host holds, given again to a restored row."""
        HostToken.objects.update_or_create(host=self, defaults={"digest": _digest(secret)})

    @staticmethod
    def by_token(secret: str) -> "Host | None":
        """The host whose token `secret` is (its digest looked up: one query)."""
        if not secret.startswith(TOKEN_PREFIX):
            return None
        found = HostToken.objects.select_related("host").filter(digest=_digest(secret)).first()
        return found.host if found is not None else None

    def token_matches(self, secret: str) -> bool:
        kept = HostToken.objects.filter(host=self).values_list("digest", flat=True).first()
        return bool(kept) and hmac.compare_digest(kept or "", _digest(secret))

    def beat(self, facts: dict[str, Any]) -> None:
        """The agent's heartbeat: its engine's facts and its own settings, now. A lost
        host that beats again is ready: its agent is back (a drain stays a drain)."""
        now = timezone.now()
        Host.objects.filter(pk=self.pk).update(heartbeat_at=now, **facts)
        Host.objects.filter(pk=self.pk, state=HostState.LOST).update(state=HostState.READY)
        self.refresh_from_db()

    def drain(self) -> bool:
        """Nothing new goes to it; what it runs carries on. True if this changed it."""
        return self._set_state(HostState.DRAINING, (HostState.READY,))

    def undrain(self) -> bool:
        return self._set_state(HostState.READY, (HostState.DRAINING,))

    def _set_state(self, state: str, from_states: tuple[str, ...]) -> bool:
        done = Host.objects.filter(pk=self.pk, state__in=from_states).update(state=state)
        self.refresh_from_db(fields=["state"])
        return bool(done)


class HostToken(models.Model):
    """A host's token for the runner's own API (runner hosts, part 2): its digest alone,
    in a table of its own, which a runner host's database role cannot read
    (core.dbrole): a runner cannot learn or replace another host's."""

    host = models.OneToOneField(Host, models.CASCADE, primary_key=True, related_name="token")
    digest = models.CharField(max_length=64)

    def __str__(self) -> str:
        return f"token of host {self.host_id}"


def keep_own_token() -> Host | None:
    """On the web host (`manage.py prepare`): its own host's token for the internal API,
    made once (core.keys.own_host_token), its digest kept on the row, again should the
    row have lost it (a database restored from a backup). `local`'s row is made here
    if its agent has not made it yet; None for another name no row has (its agent
    would not start either)."""
    host: Host | None
    if settings.SANDBOX_HOST == DEFAULT_HOST:
        host, _ = Host.objects.get_or_create(name=DEFAULT_HOST)
    else:
        host = Host.objects.filter(name=settings.SANDBOX_HOST).first()
    if host is None:
        return None
    token = keys.own_host_token(lambda: TOKEN_PREFIX + secrets.token_urlsafe(32))
    if not host.token_matches(token):
        host.keep_token(token)
    return host
