import hashlib
import hmac
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import models, transaction
from django.utils import timezone

from accounts import verbs
from core.ids import new_id
from core.links import absolute


class Team(models.Model):
    public_id = models.CharField(max_length=12, unique=True, default=new_id, editable=False)
    slug = models.SlugField(max_length=30, unique=True)
    name = models.CharField(max_length=100)
    # Policy set by a team admin: every run of the team uses gVisor, whatever
    # workspace.toml or a request asks for.
    require_gvisor = models.BooleanField(default=False)
    # The most any workspace of the team may reach (sandbox.egress.policy entries); a
    # workspace's [network] egress only narrows it. Empty: no egress at all.
    egress_ceiling = models.JSONField(default=list, blank=True)
    # Quotas set by an operator for this team (manage.py set_team_quota); empty: the
    # QUOTA_* defaults of the settings (runs.quotas).
    max_concurrent_runs = models.PositiveIntegerField(null=True, blank=True)
    max_queued_runs = models.PositiveIntegerField(null=True, blank=True)
    max_concurrent_previews = models.PositiveIntegerField(null=True, blank=True)
    cpu_seconds_per_day = models.PositiveIntegerField(null=True, blank=True)
    # Distinct reviewers whose approval a deploy needs (deploys.actions.approve_deploy).
    approvals_required = models.PositiveSmallIntegerField(default=1)
    # Whether the person who asked (or whose token asked) for a deploy or a sandbox
    # contract may approve it themselves, confirming it on the page (recorded).
    allow_self_approval = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.slug

    def set_quotas(self, quotas: dict[str, int | None]) -> None:
        """An operator's overrides, by field name (None: back to the QUOTA_* setting)."""
        for field, value in quotas.items():
            setattr(self, field, value)
        self.save(update_fields=list(quotas))


class Role(models.TextChoices):
    MEMBER = "member", "Member"
    REVIEWER = "reviewer", "Reviewer"
    ADMIN = "admin", "Admin"


# What each role may do, cumulatively: member < reviewer < admin.
ROLE_RANK = {Role.MEMBER: 0, Role.REVIEWER: 1, Role.ADMIN: 2}


class Membership(models.Model):
    team = models.ForeignKey(Team, models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint("team", "user", name="one_membership_per_team")]
        ordering = ["user__username"]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"

    def has_role(self, need: str) -> bool:
        return ROLE_RANK[Role(self.role)] >= ROLE_RANK[Role(need)]

    @property
    def is_admin(self) -> bool:
        return self.role == Role.ADMIN

    @property
    def can_review(self) -> bool:
        return self.has_role(Role.REVIEWER)


def _digest(secret: str) -> str:
    """HMAC-SHA256 of a bearer secret: a leaked database does not leak usable tokens."""
    return hmac.new(settings.SECRET_KEY.encode(), secret.encode(), hashlib.sha256).hexdigest()


class ApiToken(models.Model):
    """A bearer token for agents and scripts: `berth_<public_id><secret>`.

    The public id (not secret) finds the row; the HMAC of the whole value is compared
    in constant time. The plaintext exists only in the response that created it.
    """

    PREFIX = "berth_"
    SCOPES = ("workspace:read", "workspace:write", "run", "preview", "deploy:request")

    public_id = models.CharField(max_length=12, unique=True, default=new_id, editable=False)
    team = models.ForeignKey(Team, models.CASCADE, related_name="tokens")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, models.CASCADE, related_name="tokens")
    name = models.CharField(max_length=100)
    scopes = models.JSONField(default=list)
    # Empty means every workspace of the team.
    workspaces = models.JSONField(default=list, blank=True)
    # Names of team secrets this token may grant to runs; empty means none.
    secret_names = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.display_prefix}…)"

    @property
    def display_prefix(self) -> str:
        return f"{self.PREFIX}{self.public_id[:6]}"

    @classmethod
    def mint(cls, **fields: Any) -> tuple["ApiToken", str]:
        """Create a token row; returns it with the plaintext, which is never stored."""
        token = cls(**fields)
        secret = f"{cls.PREFIX}{token.public_id}{new_id(32)}"
        with transaction.atomic():
            token.save()
            TokenDigest.objects.create(token=token, digest=_digest(secret))
        return token, secret

    @classmethod
    def find(cls, secret: str) -> "ApiToken | None":
        """The token this plaintext belongs to, whatever its state; None if none."""
        body = secret.removeprefix(cls.PREFIX)
        if body == secret or len(body) != 44:
            return None
        # One query: this runs on every API request. `owner_is_member` says whether the
        # token's user is still in its team (a removed member's tokens stop working).
        rows = (
            cls.objects.select_related("team", "user", "secret")
            .filter(public_id=body[:12])
            .annotate(
                owner_is_member=models.Exists(
                    Membership.objects.filter(
                        team=models.OuterRef("team"), user=models.OuterRef("user")
                    )
                )
            )
            .order_by()[:1]
        )
        token = next(iter(rows), None)
        kept = getattr(token, "secret", None)  # a row made outside `mint` has none
        if token is None or kept is None or not hmac.compare_digest(kept.digest, _digest(secret)):
            return None
        return token

    @property
    def is_expired(self) -> bool:
        return self.expires_at <= timezone.now()

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None and not self.is_expired

    @property
    def status(self) -> str:
        if self.revoked_at:
            return "revoked"
        return "expired" if self.is_expired else "active"

    def has_scope(self, scope: str) -> bool:
        return scope in self.scopes

    def allows_workspace(self, slug: str) -> bool:
        return not self.workspaces or slug in self.workspaces

    def touch(self) -> None:
        """Record use, at most once a minute: a busy agent should not write every request."""
        now = timezone.now()
        if self.last_used_at is None or now - self.last_used_at > timedelta(minutes=1):
            ApiToken.objects.filter(pk=self.pk).update(last_used_at=now)
            self.last_used_at = now


class TokenDigest(models.Model):
    """An API token's digest, in a table of its own: a runner host's database role reads
    tokens' rows (expiry, revocation) but never this table (core.dbrole)."""

    token = models.OneToOneField(ApiToken, models.CASCADE, primary_key=True, related_name="secret")
    digest = models.CharField(max_length=64)

    def __str__(self) -> str:
        return f"digest of {self.token_id}"


class Invitation(models.Model):
    """A single-use link an admin hands to someone so they can join the team."""

    public_id = models.CharField(max_length=12, unique=True, default=new_id, editable=False)
    team = models.ForeignKey(Team, models.CASCADE, related_name="invitations")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    note = models.CharField(max_length=100, blank=True)
    digest = models.CharField(max_length=64)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, models.CASCADE, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True, related_name="+"
    )
    accepted_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"invitation {self.public_id} to {self.team_id} as {self.role}"

    @classmethod
    def mint(cls, **fields: Any) -> tuple["Invitation", str]:
        invitation = cls(**fields)
        secret = f"{invitation.public_id}{new_id(32)}"
        invitation.digest = _digest(secret)
        invitation.save()
        return invitation, secret

    @classmethod
    def find_open(cls, secret: str, *, lock: bool = False) -> "Invitation | None":
        qs = cls.objects.select_related("team")
        if lock:
            qs = qs.select_for_update()
        invitation = qs.filter(public_id=secret[:12]).first()
        if invitation is None or not hmac.compare_digest(invitation.digest, _digest(secret)):
            return None
        return invitation if invitation.is_open else None

    @property
    def is_open(self) -> bool:
        return (
            self.accepted_at is None
            and self.revoked_at is None
            and self.expires_at > timezone.now()
        )


class Activity(models.Model):
    """Who (a user, or a token and its user) did what to which thing, in which team."""

    team = models.ForeignKey(Team, models.CASCADE, related_name="activity")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True, related_name="+"
    )
    token = models.ForeignKey(ApiToken, models.SET_NULL, null=True, blank=True, related_name="+")
    verb = models.CharField(max_length=50)
    target = models.CharField(max_length=200, blank=True)
    workspace = models.CharField(max_length=30, blank=True)
    detail = models.JSONField(default=dict, blank=True)
    # The target's page as a path (accounts.targets), never a full URL: it is rendered
    # under APP_URL when shown (`link`), so a later APP_URL moves every row's link.
    path = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "activity"

    def __str__(self) -> str:
        return f"{self.actor_label} {self.verb} {self.target}"

    @property
    def words(self) -> str:
        """What the verb says, for a person (accounts.verbs)."""
        return verbs.words(self.verb)

    @property
    def link(self) -> str:
        """The target's page as a full URL ("" for a target with no page)."""
        return absolute(self.path) if self.path else ""

    @property
    def actor_label(self) -> str:
        if self.token_id:
            return f"{self.token.name} (token of {self.user})" if self.token else "a token"
        return str(self.user) if self.user else "system"


class SignInThrottle(models.Model):
    """Failed sign-ins per key (a username or an address) within a sliding window."""

    key = models.CharField(max_length=200, unique=True)
    failures = models.PositiveIntegerField(default=0)
    window_start = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.key}: {self.failures} failures"

    @classmethod
    def is_locked(cls, key: str) -> bool:
        window = timedelta(seconds=settings.SIGNIN_WINDOW_S)
        row = cls.objects.filter(key=key, window_start__gt=timezone.now() - window).first()
        return row is not None and row.failures >= settings.SIGNIN_MAX_FAILURES

    @classmethod
    def record_failure(cls, key: str) -> None:
        # The row lock keeps two concurrent failures from both reading the same count.
        with transaction.atomic():
            row, _ = cls.objects.select_for_update().get_or_create(key=key)
            now = timezone.now()
            if now - row.window_start > timedelta(seconds=settings.SIGNIN_WINDOW_S):
                row.failures, row.window_start = 0, now
            row.failures += 1
            row.save()

    @classmethod
    def clear(cls, key: str) -> None:
        cls.objects.filter(key=key).delete()
