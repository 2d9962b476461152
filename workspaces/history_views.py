"""The history pages of a workspace: its log, one commit, and a comparison of two refs;
and the diff lines every page that shows a patch renders (runs, deploys)."""

import re
from datetime import UTC, datetime

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from accounts.models import Membership
from core.errors import BerthError, Invalid
from workspaces import history
from workspaces.models import Workspace
from workspaces.paths import clean_dir
from workspaces.store import open_store
from workspaces.views import (
    crumbs,
    error_page,
    urls_of,
    workspace_page,
)

HISTORY_PER_PAGE = 30
HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@")


@workspace_page
def history_page(
    request: HttpRequest, membership: Membership, workspace: Workspace
) -> HttpResponse:
    ref = request.GET.get("ref") or workspace.default_branch
    try:
        path = clean_dir(request.GET.get("path"))
        try:
            page = int(request.GET.get("page") or 1)
        except ValueError:
            raise Invalid("page must be a number.", {"field": "page"}) from None
        with open_store(workspace) as store:
            branches = store.branches()
            found = history.history(store, store.resolve(ref), path, page, HISTORY_PER_PAGE)
            for c in found["commits"]:
                c["when"] = datetime.fromtimestamp(c["authored_at"], tz=UTC)
    except BerthError as e:
        return error_page(request, membership, e)
    ctx = {
        "membership": membership,
        "workspace": workspace,
        "urls": urls_of(workspace),
        "tab": "history",
        "ref": ref,
        "branch": ref if ref in branches else None,
        "branches": sorted(branches),
        "path": path,
        "crumbs": crumbs(path),
        "page": found,
        "clone_url": workspace.git_url,
    }
    return render(request, "workspaces/history.html", ctx)


def diff_lines(patch: str) -> list[tuple[str, int | None, int | None, str]]:
    """A unified patch as (kind, old line number, new line number, text) rows, so the
    page can show both gutters like a code review tool."""
    rows: list[tuple[str, int | None, int | None, str]] = []
    old = new = 0
    # split("\n"), not splitlines(): a line may hold \r or \x0c that is not a break.
    for line in patch.split("\n")[2:]:
        if not line:
            continue
        if m := HUNK.match(line):
            old, new = int(m[1]), int(m[2])
            rows.append(("hunk", None, None, line))
        elif line[0] == "+":
            rows.append(("add", None, new, line[1:]))
            new += 1
        elif line[0] == "-":
            rows.append(("del", old, None, line[1:]))
            old += 1
        else:
            rows.append(("ctx", old, new, line[1:]))
            old, new = old + 1, new + 1
    return rows


@workspace_page
def commit_page(
    request: HttpRequest, membership: Membership, workspace: Workspace, sha: str
) -> HttpResponse:
    try:
        with open_store(workspace) as store:
            detail = history.commit_detail(store, history.require_commit(store, sha))
    except BerthError as e:
        return error_page(request, membership, e)
    detail["when"] = datetime.fromtimestamp(detail["authored_at"], tz=UTC)
    detail["body"] = detail["message"].partition("\n")[2].strip()
    for f in detail["diff"]["files"]:
        f["rows"] = diff_lines(f["patch"])
    ctx = {
        "membership": membership,
        "workspace": workspace,
        "urls": urls_of(workspace),
        "tab": "history",
        "c": detail,
        "clone_url": workspace.git_url,
    }
    return render(request, "workspaces/commit.html", ctx)


@workspace_page
def compare_page(
    request: HttpRequest, membership: Membership, workspace: Workspace
) -> HttpResponse:
    """What `head` has that `base` does not (e.g. what landed while you edited): the
    commits, and the diffs — of one file when `path` is given."""
    path = request.GET.get("path", "")
    try:
        with open_store(workspace) as store:
            detail = history.compare(
                store,
                history.require_commit(store, request.GET.get("base", "")),
                history.require_commit(store, request.GET.get("head", "")),
            )
    except BerthError as e:
        return error_page(request, membership, e)
    files = [f for f in detail["diff"]["files"] if not path or path in (f["path"], f["old_path"])]
    for f in files:
        f["rows"] = diff_lines(f["patch"])
    for c in detail["commits"]:
        c["when"] = datetime.fromtimestamp(c["authored_at"], tz=UTC)
    ctx = {
        "membership": membership,
        "workspace": workspace,
        "urls": urls_of(workspace),
        "tab": "history",
        "clone_url": workspace.git_url,
        "cmp": detail,
        "files": files,
        "path": path,
    }
    return render(request, "workspaces/compare.html", ctx)


# -- settings --------------------------------------------------------------------------
