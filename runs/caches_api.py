"""JSON API doors onto a workspace's dependency caches: list them, and (admins) drop one."""

from django.conf import settings
from django.db.models import Sum
from django.http import HttpRequest, HttpResponse
from ninja import Router

from accounts.access import require_team_admin
from core.errors import NotFound
from core.schemas import answers
from runs import caches
from runs.models import DepCache
from runs.resource_schemas import CacheOut, CachesOut
from workspaces.api import actor_of, workspace_for
from workspaces.models import Workspace

router = Router(tags=["caches"])


def caches_of(workspace: Workspace) -> list[tuple[DepCache, bool]]:
    """The workspace's caches, most recently used first, each with whether an active
    run has it mounted (then it cannot be dropped yet)."""
    rows = DepCache.objects.filter(workspace=workspace).select_related("built_by")
    return [(c, caches.in_use(c.volume)) for c in rows]


def totals(rows: list[tuple[DepCache, bool]]) -> dict[str, int]:
    """The operator's limit and the total it applies to: every cache of this instance,
    not only this workspace's (eviction past it takes the least recently used of all)."""
    total = DepCache.objects.aggregate(total=Sum("size_bytes"))["total"] or 0
    return {
        "workspace_bytes": sum(c.size_bytes for c, _ in rows),
        "total_bytes": total,
        "limit_bytes": settings.DEPS_CACHE_MAX_BYTES,
    }


def caches_out(workspace: Workspace) -> CachesOut:
    rows = caches_of(workspace)
    return CachesOut(caches=[CacheOut.of(c, used) for c, used in rows], **totals(rows))


def cache_of(workspace: Workspace, public_id: str) -> DepCache:
    cache = (
        DepCache.objects.select_related("workspace__team")
        .filter(workspace=workspace, public_id=public_id)
        .first()
    )
    if cache is None:
        raise NotFound(
            "No such cache; it may have been evicted or dropped already.", {"cache": public_id}
        )
    return cache


@router.get(
    "/workspaces/{slug}/caches",
    response=answers(CachesOut, 403, 404),
    summary="The workspace's dependency caches",
)
def list_caches(request: HttpRequest, slug: str) -> CachesOut:
    return caches_out(workspace_for(request, slug, "workspace:read"))


@router.delete(
    "/workspaces/{slug}/caches/{cache_id}",
    response=answers(None, 403, 404, 409, status=204),
    summary="Drop a dependency cache (team admins): the next run runs setup",
)
def drop_cache(request: HttpRequest, slug: str, cache_id: str) -> HttpResponse:
    workspace = workspace_for(request, slug, "workspace:write")
    actor = actor_of(request)
    require_team_admin(actor, workspace.team)
    caches.drop_cache(cache_of(workspace, cache_id), actor)
    return HttpResponse(status=204)
