"""Dependency caches: the /deps volumes `[setup]` fills, keyed, reused read-only, evicted.

A cache is shared by every run of its key, whatever branch asked, and `main`'s runs with
secrets mount what a branch's setup left. So the key covers everything setup can see:
the image id, the setup command, the `cache_key` entries at the run's commit (path, mode
and Git object id: a blob id hashes a file's content, a tree id a whole folder's), the
runtime and the egress the run may reach. Setup's container sees only those entries at
/workspace (sandbox.backend), every time stamp fixed, and no env: a change to anything it
could read builds a new cache rather than reusing one filled from other input. Limits
are left out: they bound what setup may use, not what it reads.
"""

import hashlib
import json
import logging
from typing import Any

import docker
from django.conf import settings
from django.db import transaction

from accounts.access import Actor
from accounts.actions import record
from core.errors import Conflict, NotFound
from runs.models import ACTIVE_STATES, DepCache, Run
from sandbox.docker import SandboxError
from sandbox.engine import engine
from sandbox.models import this_host
from workspaces.store import open_store

log = logging.getLogger(__name__)

# The time stamp of every file setup sees: the commit's own time is not in the key.
KEY_FILES_MTIME = 946684800  # 2000-01-01: zip-based tools refuse times before 1980


def key_entries_at(workspace: Any, commit: str, paths: list[str]) -> list[list[Any]]:
    """Each `cache_key` path at `commit`: [path, mode, object id], or [path, None] when
    it is absent there (named in the key as absent). Read from Git when the run is
    queued, on the web host: a runner host never opens a workspace's store (docs/hosts.md)."""
    found: list[list[Any]] = []
    with open_store(workspace) as store:
        for path in paths:
            try:
                mode, sha = store.lookup(commit, path)
            except NotFound:
                found.append([path, None])
                continue
            found.append([path, mode, sha.decode()])
    return found


def key_files(run: Run) -> list[tuple[str, int, bytes]]:
    """The entries present at the run's commit, as (path, mode, object id): all that
    setup's /workspace holds."""
    entries = run.setup.get("key_entries", [])
    return [(e[0], e[1], e[2].encode()) for e in entries if e[1] is not None]


def cache_key(run: Run, image_id: str) -> str:
    if "key_entries" not in run.setup:
        # Queued before they were read at queueing, and not readable then (the upgrade's
        # migration skips such a run): never keyed from less than its inputs.
        raise SandboxError(
            "sandbox_failed", detail="its cache key's files could not be read; run it again"
        )
    parts: list[object] = [
        image_id,
        run.setup.get("command", ""),
        run.setup["key_entries"],
        run.runtime,
        sorted(run.network.get("egress") or []),
    ]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def volume_exists(name: str) -> bool:
    try:
        engine().volumes.get(name)
    except docker.errors.NotFound:
        return False
    return True


def find_ready(run: Run, key: str) -> DepCache | None:
    """The filled cache for this key on the run's host whose volume still exists there
    (this is that host's worker), marked as used now."""
    cache = DepCache.objects.filter(
        workspace=run.workspace_id, key=key, host=run.runner_host
    ).first()
    if cache is None:
        return None
    if not volume_exists(cache.volume):
        cache.delete()  # removed behind our back: build it again
        return None
    cache.mark_used()
    return cache


def keep_filled(run: Run, size_bytes: int) -> DepCache:
    """After a successful setup: this run's volume becomes the cache for its key, unless
    a concurrent run of the same key got there first (then this volume goes at the end
    of the run, and later runs use the winner's)."""
    return DepCache.keep(run, size_bytes)


def is_cache(volume: str) -> bool:
    return DepCache.objects.filter(volume=volume).exists()


def in_use(volume: str) -> bool:
    return any(
        r.setup.get("volume") == volume
        for r in Run.objects.filter(state__in=ACTIVE_STATES).exclude(setup={})
    )


def remove_volume(name: str, quiet: bool = False) -> bool:
    """Remove a cache volume; False if the engine refuses (mounted by a container).
    `quiet`: a refusal already said once is not logged again."""
    try:
        engine().volumes.get(name).remove()
    except docker.errors.NotFound:
        return True
    except docker.errors.APIError as e:
        if not quiet:
            log.info("cache volume %s not removed: %s", name, e)
        return False
    return True


def drop_cache(cache: DepCache, actor: Actor) -> None:
    """An admin drops a cache: the next run with its key runs setup again. The row goes
    here; the volume is its host's agent's to remove (its sweep takes every /deps
    volume no cache row and no active run holds), so this door never touches an engine
    (the cache may be on another host's)."""
    if in_use(cache.volume):
        raise Conflict(
            "A run is using this cache right now; drop it once that run ends.",
            {"cache": cache.public_id},
        )
    with transaction.atomic():
        record(
            cache.workspace.team,
            actor,
            "cache.dropped",
            f"cache:{cache.public_id}",
            cache.workspace.slug,
            key=cache.key[:12],
            size_bytes=cache.size_bytes,
        )
        cache.delete()


def evict(max_bytes: int | None = None) -> list[str]:
    """Least recently used first, drop this host's caches until their total is under the
    operator's limit (per host: it bounds this host's disk); caches in use by an active
    run are kept. Run by this host's worker (runs.tasks.evict_host_caches): the volumes
    are on its engine, and another host's rows are never touched."""
    limit = settings.DEPS_CACHE_MAX_BYTES if max_bytes is None else max_bytes
    caches = list(DepCache.objects.filter(host=this_host()).order_by("last_used_at", "id"))
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
