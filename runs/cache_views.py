"""The "Dependency caches" page of a workspace: what `[setup]` left, and (admins) drop.

Thin doors: the listing is the API's (`caches_of`, `totals`), the drop goes through
`caches.drop_cache`, so the page obeys the API's rules and writes the same Activity row.
"""

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from accounts.access import Actor, require_team_admin
from accounts.models import Membership
from core.errors import BerthError, Conflict
from runs import caches
from runs.caches_api import cache_of, caches_of, totals
from workspaces.models import Workspace
from workspaces.views import error_page, urls_of, workspace_page


@workspace_page
def caches_page(request: HttpRequest, membership: Membership, workspace: Workspace) -> HttpResponse:
    rows = caches_of(workspace)
    ctx = {
        "membership": membership,
        "workspace": workspace,
        "urls": urls_of(workspace),
        "tab": "settings",
        "clone_url": workspace.git_url,
        "rows": [{"cache": c, "in_use": used} for c, used in rows],
        **totals(rows),
    }
    return render(request, "runner/caches.html", ctx)


@require_POST
@workspace_page
def drop(
    request: HttpRequest, membership: Membership, workspace: Workspace, cache_id: str
) -> HttpResponse:
    actor = Actor(membership.user)
    try:
        require_team_admin(actor, workspace.team)
        cache = cache_of(workspace, cache_id)
        caches.drop_cache(cache, actor)
    except Conflict as e:  # a run has it mounted: say so on the page, nothing changed
        messages.error(request, e.message)
    except BerthError as e:
        return error_page(request, membership, e)
    else:
        messages.success(
            request,
            f"Dropped cache {cache.key[:12]}; the next run with that key runs [setup] again.",
        )
    return redirect("workspace-caches", team=workspace.team.slug, slug=workspace.slug)
