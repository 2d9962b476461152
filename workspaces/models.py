from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import models

from accounts.models import Team
from core.ids import new_id


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
