from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from accounts.models import Team
from core.ids import new_id
from core.links import absolute


class Workspace(models.Model):
    """A Git repository a team edits, runs and deploys. Source always survives."""

    RESERVED_SLUGS = ("xn",)  # `xn--…` would make a punycode-looking release host

    public_id = models.CharField(max_length=12, unique=True, default=new_id, editable=False)
    team = models.ForeignKey(Team, models.CASCADE, related_name="workspaces")
    slug = models.SlugField(max_length=30)
    name = models.CharField(max_length=100)
    default_branch = models.CharField(max_length=100, default="main")
    template = models.CharField(max_length=30, blank=True)
    allow_force_push = models.BooleanField(default=False)
    # Set by a team admin; workspace.toml cannot lower it (runs.policy).
    require_gvisor = models.BooleanField(default=False)
    # Set by a team admin: releases are public unless this limits them to the team.
    releases_team_only = models.BooleanField(default=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint("team", "slug", name="workspace_slug_per_team")]
        ordering = ["slug"]

    def __str__(self) -> str:
        return f"{self.team.slug}/{self.slug}"

    @property
    def repo_path(self) -> Path:
        """Named by ids, not slugs: nothing a user types ever becomes a host path."""
        return Path(settings.DATA_DIR) / "repos" / self.team.public_id / f"{self.public_id}.git"

    @property
    def git_url(self) -> str:
        """The clone URL, under APP_URL on every door: never the asking request's Host,
        which a client chooses (docs/security.md 38)."""
        return absolute(f"/git/{self.team.slug}/{self.slug}.git")

    @property
    def requires_gvisor(self) -> bool:
        return self.require_gvisor or self.team.require_gvisor

    def set_releases_team_only(self, team_only: bool) -> None:
        Workspace.objects.filter(pk=self.pk).update(releases_team_only=team_only)
        self.releases_team_only = team_only

    def live_previews(self) -> list[Any]:
        """Previews starting or ready (the previews app's rows, by their related name:
        workspaces never imports it)."""
        return list(self.previews.filter(state__in=("starting", "ready"), kind="preview")[:5])


class PinnedCommit(models.Model):
    """A commit a Berth record refers to (a run's input, a deploy request): it stays
    usable by its SHA after a force-push or a branch deletion leaves it unreachable.
    Pinned only while reachable, so a refused push's objects can never be pinned."""

    workspace = models.ForeignKey(Workspace, models.CASCADE, related_name="pins")
    sha = models.CharField(max_length=40)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint("workspace", "sha", name="pinned_commit_once")]

    def __str__(self) -> str:
        return f"{self.workspace_id}@{self.sha[:12]}"


class ReviewState(models.TextChoices):
    PENDING = "pending", "Waiting for a reviewer"
    APPROVED = "approved", "Approved"
    REJECTED = "rejected", "Rejected"
    # An approval that lapsed: a reviewer's narrower contract, written on a page, took
    # its place (superseded), or a reviewer took it back (revoked). It no longer counts.
    SUPERSEDED = "superseded", "Superseded"
    REVOKED = "revoked", "Revoked"


# The states of a review that still decide asks for its contract (one per contract).
LIVE_REVIEW_STATES = (ReviewState.PENDING, ReviewState.APPROVED, ReviewState.REJECTED)


class ReviewSource(models.TextChoices):
    ASKED = "asked", "Asked for by a run, preview or release build"
    PAGE = "page", "Typed in the editor by a reviewer or admin"
    INITIAL = "initial", "The workspace's contract when reviews began"


class ContractReview(models.Model):
    """One sandbox contract of a workspace (workspaces.contract.asked) and the decision
    on it. Keyed by the contract's content: an approval covers that contract on every
    branch of the workspace, after a merge or a revert. The last approved one is what a
    new ask is compared with (workspaces.reviews). A lapsed one (superseded, revoked)
    stays as history; asking for its contract again opens a new review."""

    public_id = models.CharField(max_length=12, unique=True, default=new_id, editable=False)
    workspace = models.ForeignKey(Workspace, models.CASCADE, related_name="contract_reviews")
    content_hash = models.CharField(max_length=64)
    values = models.JSONField()
    # The approved contract it was compared with, and what widened (Widening.as_dict).
    baseline = models.JSONField(null=True, blank=True)
    widened = models.JSONField(default=list, blank=True)
    state = models.CharField(max_length=10, choices=ReviewState.choices)
    source = models.CharField(max_length=10, choices=ReviewSource.choices)
    # What asked first: the commit (its author as Git says it), the ref, the door.
    commit = models.CharField(max_length=40, blank=True)
    commit_author = models.CharField(max_length=300, blank=True)
    ref = models.CharField(max_length=200, blank=True)
    asked_for = models.CharField(max_length=200, blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.SET_NULL, null=True, related_name="+"
    )
    token = models.ForeignKey("accounts.ApiToken", models.SET_NULL, null=True, related_name="+")
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.SET_NULL, null=True, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    note = models.TextField(blank=True)
    # The decider is the asker or a writer (a team that allows it, confirmed), or wrote
    # it on a page.
    self_approved = models.BooleanField(default=False)
    # Who wrote the widening (workspaces.contract_writes): the asker is often a teammate
    # whose run met it first, and the writer must never count as another person.
    written_by = models.ManyToManyField(settings.AUTH_USER_MODEL, related_name="+", blank=True)
    # Who ended an approval (superseded, revoked), when, and why.
    lapsed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True, related_name="+"
    )
    lapsed_at = models.DateTimeField(null=True, blank=True)
    lapse_note = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                "workspace",
                "content_hash",
                condition=models.Q(state__in=LIVE_REVIEW_STATES),
                name="one_live_review_per_contract",
            )
        ]
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"contract review {self.public_id} ({self.state})"

    @property
    def url(self) -> str:
        w = self.workspace
        return f"/t/{w.team.slug}/w/{w.slug}/contract-reviews/{self.public_id}/"

    def is_own(self, user: Any) -> bool:
        """Whether `user` asked for this contract or wrote a commit that brought its
        widening in: either way, not another person's approval."""
        return self.requested_by_id == user.pk or self.written_by.filter(pk=user.pk).exists()

    def decide(self, to: str, user: Any, note: str, self_approved: bool) -> bool:
        """A conditional UPDATE: only a pending review is decided, once."""
        updated = ContractReview.objects.filter(pk=self.pk, state=ReviewState.PENDING).update(
            state=to,
            decided_by=user,
            decided_at=timezone.now(),
            note=note,
            self_approved=self_approved,
        )
        if updated:
            self.refresh_from_db()
        return bool(updated)

    def lapse(self, to: str, user: Any, note: str) -> bool:
        """A conditional UPDATE: only an approved review lapses, once."""
        updated = ContractReview.objects.filter(pk=self.pk, state=ReviewState.APPROVED).update(
            state=to, lapsed_by=user, lapsed_at=timezone.now(), lapse_note=note
        )
        if updated:
            self.refresh_from_db()
        return bool(updated)

    def compare_with(self, baseline: dict[str, Any], widened: list[dict[str, Any]]) -> None:
        """A pending review shows what it widens against today's approved contract."""
        if self.baseline != baseline or self.widened != widened:
            ContractReview.objects.filter(pk=self.pk, state=ReviewState.PENDING).update(
                baseline=baseline, widened=widened
            )
            self.baseline, self.widened = baseline, widened


class ContractWrite(models.Model):
    """A commit that changed `workspace.toml`, and the person (and token) behind the door
    that brought it in: an API or MCP write, a page's, a session's or a run's commit,
    a push. Git's author line is whatever the writer typed; this is who Berth saw."""

    workspace = models.ForeignKey(Workspace, models.CASCADE, related_name="+")
    commit = models.CharField(max_length=40)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, models.CASCADE, related_name="+")
    token = models.ForeignKey("accounts.ApiToken", models.SET_NULL, null=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index("workspace", "commit", name="contract_write_commit")]

    def __str__(self) -> str:
        return f"{self.user} wrote workspace.toml in {self.commit[:12]}"


class ContractApproval(models.Model):
    """One reviewer's approval of a contract: a team that requires N distinct approvers
    for a deploy requires them for a widened sandbox contract too."""

    review = models.ForeignKey(ContractReview, models.CASCADE, related_name="approvals")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, models.CASCADE, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint("review", "user", name="one_contract_approval_each")]
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.user} approved {self.review}"
