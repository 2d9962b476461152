"""Dependency caches' rows (runs.caches says what they are for): their own module, one
model, imported by runs.models so Django finds it."""

from django.db import models
from django.utils import timezone

from core.ids import new_id
from runs.models import Run
from workspaces.models import Workspace


class DepCache(models.Model):
    """A filled dependency cache: the /deps volume a setup step left, keyed by the hashes
    of its `cache_key` files, its command and the image id. Mounted read-only by every
    run that hits it, so no unreviewed run can change what a later one gets."""

    public_id = models.CharField(max_length=12, unique=True, default=new_id, editable=False)
    workspace = models.ForeignKey(Workspace, models.CASCADE, related_name="dep_caches")
    key = models.CharField(max_length=64)
    image_id = models.CharField(max_length=100)
    volume = models.CharField(max_length=200, unique=True)
    # The host whose engine holds the volume: runs placed there use it, its own worker
    # evicts it, its agent removes it once dropped. Another host builds its own.
    host = models.CharField(max_length=40)
    size_bytes = models.PositiveBigIntegerField(default=0)
    built_by = models.ForeignKey(Run, models.SET_NULL, null=True, blank=True, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint("workspace", "key", "host", name="one_cache_per_key_and_host")
        ]
        ordering = ["-last_used_at"]

    def __str__(self) -> str:
        return f"cache {self.key[:12]} of {self.workspace}"

    @staticmethod
    def keep(run: Run, size_bytes: int) -> "DepCache":
        """The run's filled /deps becomes its key's cache, unless another run of the key
        made one first: then that one, which later runs use."""
        cache, _ = DepCache.objects.get_or_create(
            workspace_id=run.workspace_id,
            key=run.setup["key"],
            host=run.runner_host,
            defaults={
                "image_id": run.image_id,
                "volume": run.deps_volume_name,
                "size_bytes": size_bytes,
                "built_by": run,
            },
        )
        return cache

    def mark_used(self) -> None:
        DepCache.objects.filter(pk=self.pk).update(last_used_at=timezone.now())
