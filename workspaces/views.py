"""The workspace pages: the team dashboard, the editor page, settings (history, commits
and compare are in `history_views.py`; the doors that change files in `edits.py`).

Thin doors: every change goes through `workspaces.actions` with the signed-in person as
the actor, so a page obeys the API's rules and writes the same Activity rows.
"""

from collections.abc import Callable
from datetime import UTC, datetime
from functools import wraps
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.db.models import Count, Q
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_POST

from accounts import feed
from accounts.access import Actor
from accounts.models import Membership
from accounts.views import team_page
from core.errors import BerthError, NotFound
from workspaces import actions, history, readme
from workspaces import config as workspace_config
from workspaces.access import access_workspace
from workspaces.forms import DeleteWorkspaceForm, NewWorkspaceForm
from workspaces.gitstore import MODE_TREE, GitStore
from workspaces.models import Workspace
from workspaces.paths import clean_dir
from workspaces.store import open_store


def workspace_page(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Resolve `/t/<team>/w/<slug>/…` to the user's membership and the workspace; 404
    for a workspace of another team, exactly as for one that does not exist."""

    @team_page()
    @wraps(view)
    def wrapper(
        request: HttpRequest, membership: Membership, slug: str, *args: Any, **kwargs: Any
    ) -> HttpResponse:
        try:
            workspace = access_workspace(
                Actor(membership.user), membership.team, slug, "workspace:read"
            )
        except NotFound as e:
            raise Http404(e.message) from e
        return view(request, membership, workspace, *args, **kwargs)

    return wrapper


def urls_of(workspace: Workspace) -> dict[str, str]:
    args = [workspace.team.slug, workspace.slug]
    names = [
        "tree",
        "save",
        "new-file",
        "rename-file",
        "delete-file",
        "rename-folder",
        "delete-folder",
        "upload",
        "branch-state",
        "file-paths",
        "search",
        "new-branch",
        "history",
        "settings",
        "delete",
    ]
    urls = {name.replace("-", "_"): reverse(f"workspace-{name}", args=args) for name in names}
    urls["page"] = reverse("workspace", args=args)
    urls["commits"] = urls["page"] + "commits/"
    return urls


def page_url(workspace: Workspace, **params: str | None) -> str:
    url = reverse("workspace", args=[workspace.team.slug, workspace.slug])
    query = urlencode({k: v for k, v in params.items() if v})
    return f"{url}?{query}" if query else url


def summary(store: GitStore, sha: str) -> dict[str, Any]:
    info = history.commit_summary(store, sha)
    info["when"] = datetime.fromtimestamp(info["authored_at"], tz=UTC)
    return info


def is_htmx(request: HttpRequest) -> bool:
    return bool(getattr(request, "htmx", False))  # set by django_htmx's middleware


def error_page(request: HttpRequest, membership: Membership, e: BerthError) -> HttpResponse:
    return render(
        request, "error.html", {"membership": membership, "message": e.message}, status=e.status
    )


# -- the dashboard ---------------------------------------------------------------------


@team_page()
def dashboard(request: HttpRequest, membership: Membership) -> HttpResponse:
    form = NewWorkspaceForm(request.POST) if request.method == "POST" else NewWorkspaceForm()
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            workspace = actions.create_workspace(
                membership.team,
                Actor(membership.user),
                data["name"],
                data["slug"] or None,
                data["template"] or None,
            )
        except BerthError as e:
            form.add_error(form.ERROR_FIELDS.get(e.details.get("field", "")), e.message)
        else:
            return redirect(page_url(workspace))
    rows = []
    # What is going on in each: runs going or waiting, previews up (by related names:
    # workspaces never imports the apps that own them).
    going = ("queued", "preparing", "running")
    workspaces = membership.team.workspaces.select_related("team").annotate(
        running=Count("runs", filter=Q(runs__state__in=going, runs__purpose="run"), distinct=True),
        previewing=Count(
            "previews",
            filter=Q(previews__state__in=("starting", "ready"), previews__kind="preview"),
            distinct=True,
        ),
    )
    for workspace in workspaces:
        with open_store(workspace) as store:
            head = store.branch_head(workspace.default_branch)
            rows.append(
                {
                    "workspace": workspace,
                    "last": summary(store, head) if head else None,
                    "url": page_url(workspace),
                }
            )
    return render(
        request,
        "workspaces/dashboard.html",
        {"membership": membership, "rows": rows, "form": form},
        status=422 if form.errors else 200,
    )


# -- the workspace page ----------------------------------------------------------------


def tree_along(store: GitStore, commit: str, path: str) -> list[dict[str, Any]]:
    """The root folder's entries, with every folder on the way to `path` opened, so a
    deep link shows where the file is without a round trip per level."""
    entries = level = store.list_dir(commit, "")
    parts = path.split("/") if path else []
    for i in range(len(parts)):
        prefix = "/".join(parts[: i + 1])
        folder = next((e for e in level if e["path"] == prefix and e["type"] == "dir"), None)
        if folder is None:
            break
        folder["open"] = True
        folder["children"] = level = store.list_dir(commit, prefix)
    return entries


def open_file(store: GitStore, commit: str, path: str) -> dict[str, Any]:
    """What the editor pane shows. Symlinks come back as their target only: never
    followed, so a link cannot make the page read outside the tree."""
    try:
        info = history.read_file(store, commit, path)
    except actions.FileTooLarge:
        return {"path": path, "kind": "too_large"}
    info.pop("raw", None)
    if info["type"] != "file":
        info["kind"] = info["type"]
    elif info["encoding"] != "utf-8":
        info["kind"], info["content"] = "binary", None
    else:
        info["kind"] = "text"
        if path == workspace_config.FILENAME:
            try:
                workspace_config.parse(info["content"])
            except workspace_config.ConfigError as e:
                info["config_error"] = e.message
    return info


def crumbs(path: str) -> list[tuple[str, str]]:
    parts = path.split("/") if path else []
    return [(part, "/".join(parts[: i + 1])) for i, part in enumerate(parts)]


@workspace_page
def workspace(request: HttpRequest, membership: Membership, workspace: Workspace) -> HttpResponse:
    ref = request.GET.get("ref") or workspace.default_branch
    try:
        path = clean_dir(request.GET.get("path"))
        with open_store(workspace) as store:
            branches = store.branches()
            commit = store.resolve(ref)
            file, folder, missing = None, path, ""
            if path:
                try:
                    mode, _ = store.lookup(commit, path)
                except NotFound as e:
                    missing, folder = e.message, path.rpartition("/")[0]
                else:
                    if mode != MODE_TREE:
                        file, folder = open_file(store, commit, path), path.rpartition("/")[0]
            entries = tree_along(store, commit, path)
            head = summary(store, commit)
            shown = None
            if file is None and not missing:
                shown = readme.find(
                    store,
                    folder,
                    store.list_dir(commit, folder),
                    lambda p: page_url(workspace, ref=ref, path=p),
                )
    except BerthError as e:
        return error_page(request, membership, e)
    ctx = {
        "membership": membership,
        "workspace": workspace,
        "urls": urls_of(workspace),
        "tab": "code",
        "ref": ref,
        "commit": commit,
        "head": head,
        "branch": ref if ref in branches else None,
        "branches": sorted(branches),
        "path": path,
        "crumbs": crumbs(path),
        "folder": folder,
        "file": file,
        "missing": missing,
        "entries": entries,
        "readme": shown,
        # The page shows a folder (not the root): it may be renamed or deleted.
        "is_folder": bool(path) and file is None and not missing,
        "readme_max": settings.WORKSPACE_README_MAX_BYTES,
        "upload_caps": {
            "file": settings.WORKSPACE_MAX_FILE_BYTES,
            "body": settings.MAX_REQUEST_BODY,
            "files": settings.WORKSPACE_MAX_UPLOAD_FILES,
        },
        "clone_url": workspace.git_url,
        "activity": recent_activity(workspace),
        "retention_days": settings.RUN_RETENTION_DAYS,
        "line": line_of(request.GET.get("line")),
    }
    return render(request, "workspaces/workspace.html", ctx, status=404 if missing else 200)


def line_of(raw: str | None) -> int | None:
    """`?line=12` (a search result, a traceback): where the editor puts the cursor."""
    return int(raw) if raw and raw.isdigit() and 0 < len(raw) < 8 and int(raw) > 0 else None


def recent_activity(workspace: Workspace, count: int = 8) -> dict[str, Any]:
    """The workspace's last few Activity rows, newest first, and the cursor the page's
    live feed continues from."""
    rows = list(
        workspace.team.activity.filter(workspace=workspace.slug).select_related("user", "token")[
            :count
        ]
    )
    latest = workspace.team.activity.order_by("-id").values_list("id", flat=True).first()
    return {"rows": [feed.entry(r) for r in rows], "after": latest or 0}


@workspace_page
def tree(request: HttpRequest, membership: Membership, workspace: Workspace) -> HttpResponse:
    """One folder's entries, for htmx to expand a folder in place; a plain request (a
    bookmarked or middle-clicked link) goes to the page showing that folder."""
    ref = request.GET.get("ref") or workspace.default_branch
    response: HttpResponse
    if not is_htmx(request):
        response = redirect(page_url(workspace, ref=ref, path=request.GET.get("path")))
    else:
        try:
            folder = clean_dir(request.GET.get("path"))
            with open_store(workspace) as store:
                entries = store.list_dir(store.resolve(ref), folder)
        except BerthError as e:
            response = render(
                request,
                "workspaces/workspace.html#action-error",
                {"message": e.message},
                status=e.status,
            )
        else:
            response = render(
                request,
                "workspaces/workspace.html#tree",
                {"entries": entries, "ref": ref, "path": "", "urls": urls_of(workspace)},
            )
    patch_vary_headers(response, ["HX-Request"])
    return response


# -- history and commits ---------------------------------------------------------------


def settings_response(
    request: HttpRequest,
    membership: Membership,
    workspace: Workspace,
    form: DeleteWorkspaceForm,
    status: int = 200,
) -> HttpResponse:
    ctx = {
        "membership": membership,
        "workspace": workspace,
        "urls": urls_of(workspace),
        "tab": "settings",
        "form": form,
        "clone_url": workspace.git_url,
    }
    return render(request, "workspaces/settings.html", ctx, status=status)


@workspace_page
def settings_page(
    request: HttpRequest, membership: Membership, workspace: Workspace
) -> HttpResponse:
    return settings_response(request, membership, workspace, DeleteWorkspaceForm())


@require_POST
@workspace_page
def force_push_policy(
    request: HttpRequest, membership: Membership, workspace: Workspace
) -> HttpResponse:
    if not membership.is_admin:
        return render(
            request,
            "error.html",
            {"message": "Only an admin of the team may change the push policy."},
            status=403,
        )
    allow = request.POST.get("allow_force_push") == "on"
    actions.set_force_push_policy(workspace, Actor(membership.user), allow)
    messages.success(
        request, f"Force-pushes to the default branch are now {'allowed' if allow else 'refused'}."
    )
    return redirect("workspace-settings", team=membership.team.slug, slug=workspace.slug)


@require_POST
@workspace_page
def gvisor_policy(
    request: HttpRequest, membership: Membership, workspace: Workspace
) -> HttpResponse:
    if not membership.is_admin:
        return render(
            request,
            "error.html",
            {"message": "Only an admin of the team may change the runtime policy."},
            status=403,
        )
    required = request.POST.get("require_gvisor") == "on"
    actions.set_workspace_gvisor_policy(workspace, Actor(membership.user), required)
    if required:
        messages.success(request, "Every run of this workspace now uses gVisor.")
    elif workspace.team.require_gvisor:
        messages.success(
            request,
            "This workspace no longer requires gVisor itself, but team "
            f"{workspace.team.slug} still does, so its runs still use "
            "gVisor.",
        )
    else:
        messages.success(
            request,
            "Runs of this workspace use the runtime workspace.toml or the request asks for.",
        )
    return redirect("workspace-settings", team=membership.team.slug, slug=workspace.slug)


@require_POST
@workspace_page
def delete_workspace(
    request: HttpRequest, membership: Membership, workspace: Workspace
) -> HttpResponse:
    """Admins only, and only with the slug typed: deleting removes the repository."""
    form = DeleteWorkspaceForm(request.POST)
    if not membership.is_admin:
        form.is_valid()
        form.add_error(None, "Only an admin of the team may delete a workspace.")
        return settings_response(request, membership, workspace, form, status=403)
    if not form.is_valid() or form.cleaned_data["confirm"] != workspace.slug:
        form.add_error("confirm", f"Type {workspace.slug} exactly to confirm the deletion.")
        return settings_response(request, membership, workspace, form, status=422)
    actions.delete_workspace(workspace, Actor(membership.user))
    messages.success(request, f"Deleted workspace {workspace.slug} and its repository.")
    return redirect("team", team=membership.team.slug)
