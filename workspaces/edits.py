"""The page doors that change files: save, new, rename, delete (of a file or a folder),
new branch (uploads are in `uploads.py`).

Each is one commit through `workspaces.actions` from the commit the page showed
(`base_commit`): what the branch got since is kept, a save's text is merged with it
when they changed separate places, and an overlap is refused with what would be lost
(workspaces.merge), so nobody's work is overwritten unseen. Save speaks JSON (the
editor's fetch); the others are htmx forms that also work as plain form posts.
"""

import json
import re
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseClientRedirect

from accounts.access import Actor
from accounts.models import Membership
from core.errors import BerthError, Conflict, Invalid, NotFound
from workspaces import actions, review_editor
from workspaces import config as workspace_config
from workspaces.changes import Change
from workspaces.forms import FileActionForm, NewBranchForm
from workspaces.gitstore import MODE_TREE, GitStore
from workspaces.models import Workspace
from workspaces.paths import clean_path
from workspaces.store import open_store
from workspaces.views import is_htmx, page_url, urls_of, workspace_page

SHA = re.compile(r"^[0-9a-f]{40}$")


@require_POST
@workspace_page
def save(request: HttpRequest, membership: Membership, workspace: Workspace) -> HttpResponse:
    """Write the editor's text as one commit (JSON in and out, for the page's fetch).

    `base_commit` is the commit the text was opened at (a draft kept in the browser
    keeps its own); `overwrite`, when given, is the head whose overlapping lines the
    person saw in the refusal and chose to overwrite ("Overwrite their change")."""
    try:
        try:
            body = json.loads(request.body)
        except (ValueError, RecursionError):  # RecursionError: absurdly nested JSON
            raise Invalid("The request body is not JSON.") from None
        fields = ("path", "content", "branch", "base_commit")
        if not isinstance(body, dict) or not all(isinstance(body.get(f), str) for f in fields):
            raise Invalid("Send path, content, branch and base_commit as strings.")
        if not SHA.match(body["base_commit"]):
            raise Invalid(
                "base_commit must be the 40-character SHA the page was loaded at.",
                {"field": "base_commit"},
            )
        overwrite = body.get("overwrite")
        if overwrite is not None and not (isinstance(overwrite, str) and SHA.match(overwrite)):
            raise Invalid(
                "overwrite must be the 40-character SHA of the head whose changes you saw.",
                {"field": "overwrite"},
            )
        path = clean_path(body["path"])
        message = str(body.get("message") or "").strip() or f"Update {path}"
        change = Change("write", path, actions.decode_content(body["content"], "utf-8", path))
        typed = change.content or b""  # a merge below replaces change.content
        result = actions.commit_changes(
            workspace,
            Actor(membership.user),
            [change],
            message,
            body["branch"],
            body["base_commit"],
            overwrite,
        )
        with open_store(workspace) as store:
            _, blob = store.lookup(result.sha, path)
            before = _text_at(store, body["base_commit"], path)
        review = None
        if path == workspace_config.FILENAME and not result.merged:
            # What a reviewer typed here is theirs: a narrowing is the new baseline, a
            # widening their approval where the team allows it (workspaces.review_editor).
            # Merged with lines the branch got since, it is not all theirs: nothing.
            review = review_editor.written_on_page(
                workspace,
                Actor(membership.user),
                result.sha,
                result.branch,
                typed.decode("utf-8", "replace"),
                before,
            )
    except BerthError as e:
        return JsonResponse(e.as_dict(), status=e.status)
    answer = {
        "commit": result.sha,
        "branch": result.branch,
        "parent": result.parent,
        "warnings": result.warnings,
        "followers": [asdict(f) for f in result.followers],
        "commit_url": f"{urls_of(workspace)['commits']}{result.sha}/",
        "merged": bool(result.merged),
        # The saved file's blob: the base a draft typed after this save keeps.
        "blob": blob.decode(),
        "contract_review": (
            {"id": review.public_id, "state": review.state, "url": review.url}
            if review is not None
            else None
        ),
    }
    if result.merged:
        # What was committed: the editor shows it, their lines with the person's.
        answer["content"] = (change.content or b"").decode("utf-8", "replace")
    return JsonResponse(answer)


def done(request: HttpRequest, url: str) -> HttpResponse:
    response: HttpResponse = HttpResponseClientRedirect(url) if is_htmx(request) else redirect(url)
    patch_vary_headers(response, ["HX-Request"])
    return response


def failed(request: HttpRequest, e: BerthError, back: str) -> HttpResponse:
    """htmx gets the message in the dialog (the user's input stays put); a plain form
    post gets it at the top of the page it came from."""
    response: HttpResponse
    if is_htmx(request):
        response = render(
            request,
            "workspaces/workspace.html#action-error",
            {"message": e.message},
            status=e.status,
        )
    else:
        messages.error(request, e.message)
        response = redirect(back)
    patch_vary_headers(response, ["HX-Request"])
    return response


def first_error(form: FileActionForm | NewBranchForm) -> str:
    field, errors = next(iter(form.errors.items()))
    return f"{field}: {errors[0]}" if field != "__all__" else str(errors[0])


def change_one_file(
    request: HttpRequest,
    membership: Membership,
    workspace: Workspace,
    plan: Callable[[dict[str, Any]], tuple[Change, str, str]],
) -> HttpResponse:
    """Shared by new, rename and delete: `plan` turns the form into (change, default
    message, path to open afterwards)."""
    form = FileActionForm(request.POST)
    back = page_url(workspace, ref=request.POST.get("branch"), path=request.POST.get("path"))
    try:
        if not form.is_valid():
            raise Invalid(first_error(form))
        data = form.cleaned_data
        change, message, then = plan(data)
        result = actions.commit_changes(
            workspace,
            Actor(membership.user),
            [change],
            data["message"].strip() or message,
            data["branch"],
            data["base_commit"],
        )
    except BerthError as e:
        return failed(request, e, back)
    messages.success(request, f"{message}: commit {result.sha[:7]}.")
    for follower in result.followers:
        if follower.state == "conflict":
            messages.warning(request, f"Session {follower.id}: {follower.message}")
    return done(request, page_url(workspace, ref=result.branch, path=then))


@require_POST
@workspace_page
def new_file(request: HttpRequest, membership: Membership, workspace: Workspace) -> HttpResponse:
    def plan(data: dict[str, Any]) -> tuple[Change, str, str]:
        path = clean_path(data["path"])
        # A write would silently replace an existing file: looked for at the branch's
        # head, which becomes the base, so a file made after this look is an overlap
        # (added on both) rather than emptied.
        with open_store(workspace) as store:
            head = store.branch_head(data["branch"])
            if head is not None:
                try:
                    store.lookup(head, path)
                except NotFound:
                    data["base_commit"] = head
                else:
                    raise Conflict(
                        f"{path!r} already exists; open it from the tree.", {"path": path}
                    )
        return Change("write", path, b""), f"Create {path}", path

    return change_one_file(request, membership, workspace, plan)


@require_POST
@workspace_page
def rename_file(request: HttpRequest, membership: Membership, workspace: Workspace) -> HttpResponse:
    def plan(data: dict[str, Any]) -> tuple[Change, str, str]:
        path, to = clean_path(data["path"]), clean_path(data["to"] or "", what="new path")
        return Change("rename", path, to=to, kind="file"), f"Rename {path} to {to}", to

    return change_one_file(request, membership, workspace, plan)


@require_POST
@workspace_page
def rename_folder(
    request: HttpRequest, membership: Membership, workspace: Workspace
) -> HttpResponse:
    """The folder with everything in it, as one commit (a rename of one tree entry)."""

    def plan(data: dict[str, Any]) -> tuple[Change, str, str]:
        path, to = clean_path(data["path"]), clean_path(data["to"] or "", what="new path")
        return Change("rename", path, to=to, kind="folder"), f"Rename folder {path} to {to}", to

    return change_one_file(request, membership, workspace, plan)


@require_POST
@workspace_page
def delete_folder(
    request: HttpRequest, membership: Membership, workspace: Workspace
) -> HttpResponse:
    def plan(data: dict[str, Any]) -> tuple[Change, str, str]:
        path = clean_path(data["path"])
        return (
            Change("delete", path, kind="folder"),
            f"Delete folder {path}",
            path.rpartition("/")[0],
        )

    return change_one_file(request, membership, workspace, plan)


@require_POST
@workspace_page
def delete_file(request: HttpRequest, membership: Membership, workspace: Workspace) -> HttpResponse:
    def plan(data: dict[str, Any]) -> tuple[Change, str, str]:
        path = clean_path(data["path"])
        return Change("delete", path, kind="file"), f"Delete {path}", path.rpartition("/")[0]

    return change_one_file(request, membership, workspace, plan)


@require_POST
@workspace_page
def new_branch(request: HttpRequest, membership: Membership, workspace: Workspace) -> HttpResponse:
    form = NewBranchForm(request.POST)
    path = request.POST.get("path")
    try:
        if not form.is_valid():
            raise Invalid(first_error(form))
        name = form.cleaned_data["name"].strip()
        actions.create_branch(
            workspace, Actor(membership.user), name, form.cleaned_data["from_ref"]
        )
    except BerthError as e:
        return failed(request, e, page_url(workspace, ref=request.POST.get("from_ref"), path=path))
    return done(request, page_url(workspace, ref=name, path=path))


def _text_at(store: GitStore, commit: str, path: str) -> str | None:
    """The file as the editor opened it (None: it was new, or no file there)."""
    try:
        mode, sha = store.lookup(commit, path)
    except NotFound:
        return None
    if mode == MODE_TREE:
        return None
    return store.blob(sha).decode("utf-8", "replace")
