"""Finding things from the workspace page: the search panel (a page of its own without
JavaScript, its results partial for htmx) and the paths quick open (Ctrl/⌘-P) matches
against. Reads only; the search is `workspaces.search`, as the API and MCP run it."""

from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET

from accounts.models import Membership
from core.errors import BerthError
from workspaces import search
from workspaces.gitstore import MODE_SUBMODULE
from workspaces.models import Workspace
from workspaces.store import open_store
from workspaces.treesize import check_tree
from workspaces.views import is_htmx, urls_of, workspace_page


@require_GET
@workspace_page
def search_page(request: HttpRequest, membership: Membership, workspace: Workspace) -> HttpResponse:
    """`q`, `ref`, `regex`, `case`, `paths`: the API's search. Bad input is the
    panel's message (422), never an error page."""
    ref = request.GET.get("ref") or workspace.default_branch
    asked = search.Query(
        request.GET.get("q", ""),
        request.GET.get("regex") in ("1", "on", "true"),
        request.GET.get("case", "smart"),  # type: ignore[arg-type]  # compile_query checks
        request.GET.get("paths") or None,
    )
    found: dict[str, Any] | None = None
    error = None
    with open_store(workspace) as store:
        branches = store.branches()
        if asked.text:
            try:
                found = search.search(store, store.resolve(ref), asked)
            except BerthError as e:
                error = e
    ctx = {
        "membership": membership,
        "workspace": workspace,
        "urls": urls_of(workspace),
        "tab": "code",
        "ref": ref,
        "branch": ref if ref in branches else None,
        "branches": sorted(branches),
        "asked": asked,
        "found": found,
        "files": _by_file(found["matches"]) if found else [],
        "error": error,
        "clone_url": workspace.git_url,
    }
    template = "workspaces/search.html#results" if is_htmx(request) else "workspaces/search.html"
    response = render(request, template, ctx, status=error.status if error else 200)
    patch_vary_headers(response, ["HX-Request"])
    return response


def _by_file(matches: list[dict[str, Any]]) -> list[dict[str, Any]]:
    files: list[dict[str, Any]] = []
    for m in matches:
        if not files or files[-1]["path"] != m["path"]:
            files.append({"path": m["path"], "lines": []})
        text = m["text"]
        files[-1]["lines"].append(
            {
                **m,
                "before": text[: m["match_start"]],
                "match": text[m["match_start"] : m["match_end"]],
                "after": text[m["match_end"] :],
            }
        )
    return files


@require_GET
@workspace_page
def file_paths(request: HttpRequest, membership: Membership, workspace: Workspace) -> HttpResponse:
    """Every file's path at `ref` (links included: they open as links), for quick open;
    at most QUICK_OPEN_MAX_PATHS, saying when there were more. JSON for the page."""
    ref = request.GET.get("ref") or workspace.default_branch
    most = settings.QUICK_OPEN_MAX_PATHS
    try:
        with open_store(workspace) as store:
            commit = store.resolve(ref)
            check_tree(store.repo.object_store, store.commit(commit).tree, names=False)
            paths: list[str] = []
            truncated = False
            for path, mode, _ in store.walk(commit):
                if mode == MODE_SUBMODULE:
                    continue
                if len(paths) == most:
                    truncated = True
                    break
                paths.append(path)
    except BerthError as e:
        return JsonResponse(e.as_dict(), status=e.status)
    return JsonResponse({"ref": ref, "commit": commit, "paths": paths, "truncated": truncated})
