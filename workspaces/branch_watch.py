"""What the editor asks when the workspace's activity feed says something happened
(static/js/watch.js): where the branch is now, and what became of the files it has
open since the commit it was opened at — the same, changed (by which commit), deleted,
or renamed (to where). JSON, for the page's fetch; reads only.
"""

import re
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET

from accounts.models import Membership
from core.errors import BerthError, Invalid, NotFound
from workspaces import history
from workspaces.gitstore import GitStore
from workspaces.models import Workspace
from workspaces.paths import clean_path
from workspaces.store import open_store
from workspaces.treesize import FileTooLarge
from workspaces.views import urls_of, workspace_page

SHA = re.compile(r"^[0-9a-f]{40}$")
MAX_PATHS = 50  # the tabs a page keeps are fewer (workspace.js)


@require_GET
@workspace_page
def branch_state(
    request: HttpRequest, membership: Membership, workspace: Workspace
) -> HttpResponse:
    """`ref` (a branch), `base` (the commit the page's files were opened at), `path`
    (each open file), `open` (the editor's file: its new text when it changed)."""
    try:
        ref = request.GET.get("ref") or workspace.default_branch
        base = request.GET.get("base", "")
        if not SHA.match(base):
            raise Invalid("base must be the 40-character SHA the page was loaded at.")
        paths = [clean_path(p) for p in request.GET.getlist("path")[:MAX_PATHS]]
        opened = request.GET.get("open")
        with open_store(workspace) as store:
            head = store.branch_head(ref)
            if head is None:
                raise NotFound(f"No branch {ref!r}.", {"branch": ref}, code="branch_not_found")
            answer = _state(store, workspace, base, head, paths, opened)
    except BerthError as e:
        return JsonResponse(e.as_dict(), status=e.status)
    return JsonResponse(answer)


def _state(
    store: GitStore,
    workspace: Workspace,
    base: str,
    head: str,
    paths: list[str],
    opened: str | None,
) -> dict[str, Any]:
    commits_url = urls_of(workspace)["commits"]
    # A base no branch or tag reaches (a force-push dropped it) is compared as unknown:
    # each file is judged by the head alone.
    known = store.is_base(base)
    files: dict[str, dict[str, Any]] = {}
    gone = []
    for path in dict.fromkeys(paths):
        was = _entry(store, base, path) if known else None
        now = _entry(store, head, path)
        item: dict[str, Any] = {"blob": now[1].decode() if now else None}
        if now is None:
            item["state"] = "deleted"
            gone.append(path)
        else:
            item["state"] = "changed" if known and was != now else "same"
        if known and item["state"] != "same" and head != base:
            item["by"] = _last_commit(store, base, head, path, commits_url)
        files[path] = item
    if known and gone and head != base:
        for old, new in history.renames(store, base, head, gone).items():
            files[old].update(state="renamed", to=new)
    answer: dict[str, Any] = {
        "head": head,
        "moved": head != base,
        "head_url": f"{commits_url}{head}/",
        "files": files,
    }
    if opened and files.get(opened, {}).get("state") == "changed":
        try:
            info = history.read_file(store, head, opened)
        except (FileTooLarge, Invalid):
            info = {}
        if info.get("type") == "file" and info.get("encoding") == "utf-8":
            answer["open"] = {"path": opened, "blob": info["sha"], "content": info["content"]}
    return answer


def _entry(store: GitStore, commit: str, path: str) -> tuple[int, bytes] | None:
    try:
        return store.lookup(commit, path)
    except NotFound:
        return None


def _last_commit(store: GitStore, base: str, head: str, path: str, url: str) -> dict[str, Any]:
    """Who changed `path` last since `base`, to say so."""
    info = history.last_change(store, base, head, path)
    if info is None:
        return {}
    return {
        "sha": info["sha"],
        "title": info["title"],
        "author": info["author"]["name"],
        "url": f"{url}{info['sha']}/",
    }
