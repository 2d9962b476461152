"""Dependency caches: the /deps volumes `[setup]` fills, keyed, reused read-only, evicted.

The key is a hash of the image id, the setup command and the Git blob ids of the
`cache_key` files at the run's commit (a blob id is already a hash of the content), so
any change to one of them builds a new cache rather than trusting a stale one.
"""

import hashlib
import json
import logging

import docker
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from accounts.access import Actor
from accounts.actions import record
from config.errors import Conflict
from runner.engine import engine
from runner.models import ACTIVE_STATES, DepCache, Run
from workspaces.gitstore import MODE_TREE
from workspaces.store import open_store

log = logging.getLogger(__name__)


def cache_key(run: Run, image_id: str) -> str:
    parts: list[object] = [image_id, run.setup.get("command", "")]
    with open_store(run.workspace) as store:
        for path in run.setup.get("cache_key", []):
            try:
                mode, sha = store.lookup(run.commit, path)
                parts.append([path, sha.decode() if mode != MODE_TREE else "a folder"])
            except Exception:  # absent at this commit is part of the key too
                parts.append([path, None])
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def volume_exists(name: str) -> bool:
    try:
        engine().volumes.get(name)
    except docker.errors.NotFound:
        return False
    return True


def find_ready(run: Run, key: str) -> DepCache | None:
    """The filled cache for this key whose volume still exists, marked as used now."""
    cache = DepCache.objects.filter(workspace=run.workspace_id, key=key).first()
    if cache is None:
        return None
    if not volume_exists(cache.volume):
        cache.delete()  # removed behind our back: build it again
        return None
    DepCache.objects.filter(pk=cache.pk).update(last_used_at=timezone.now())
    return cache


def keep_filled(run: Run, size_bytes: int) -> DepCache:
    """After a successful setup: this run's volume becomes the cache for its key, unless
    a concurrent run of the same key got there first (then this volume goes at the end
    of the run, and later runs use the winner's)."""
    cache, _ = DepCache.objects.get_or_create(
        workspace_id=run.workspace_id, key=run.setup["key"],
        defaults={"image_id": run.image_id, "volume": run.deps_volume_name,
                  "size_bytes": size_bytes, "built_by": run})
    return cache


def is_cache(volume: str) -> bool:
    return DepCache.objects.filter(volume=volume).exists()


def in_use(volume: str) -> bool:
    return any(r.setup.get("volume") == volume
               for r in Run.objects.filter(state__in=ACTIVE_STATES).exclude(setup={}))


def remove_volume(name: str) -> bool:
    """Remove a cache volume; False if the engine refuses (mounted by a container)."""
    try:
        engine().volumes.get(name).remove()
    except docker.errors.NotFound:
        return True
    except docker.errors.APIError as e:
        log.info("cache volume %s not removed: %s", name, e)
        return False
    return True


def drop_cache(cache: DepCache, actor: Actor) -> None:
    """An admin drops a cache: the next run with its key runs setup again."""
    if in_use(cache.volume):
        raise Conflict("A run is using this cache right now; drop it once that run ends.",
                       {"cache": cache.public_id})
    with transaction.atomic():
        record(cache.workspace.team, actor, "cache.dropped", f"cache:{cache.public_id}",
               cache.workspace.slug, key=cache.key[:12], size_bytes=cache.size_bytes)
        cache.delete()
    remove_volume(cache.volume)


def evict(max_bytes: int | None = None) -> list[str]:
    """Least recently used first, drop caches of this instance until their total is
    under the operator's limit; caches in use by an active run are kept."""
    limit = settings.DEPS_CACHE_MAX_BYTES if max_bytes is None else max_bytes
    caches = list(DepCache.objects.order_by("last_used_at", "id"))
    total = sum(c.size_bytes for c in caches)
    evicted = []
    for cache in caches:
        if total <= limit:
            break
        if in_use(cache.volume) or not remove_volume(cache.volume):
            continue
        cache.delete()
        total -= cache.size_bytes
        evicted.append(cache.public_id)
        log.info("evicted dependency cache %s (%d bytes)", cache.key[:12], cache.size_bytes)
    return evicted


def cache_summary(cache: DepCache) -> dict[str, object]:
    return {"id": cache.public_id, "key": cache.key, "image_id": cache.image_id,
            "size_bytes": cache.size_bytes, "created_at": cache.created_at.isoformat(),
            "last_used_at": cache.last_used_at.isoformat(),
            "built_by": cache.built_by.public_id if cache.built_by else None}
