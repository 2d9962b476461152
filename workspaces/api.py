"""JSON API doors onto workspaces (thin: access, then an action or a read)."""

from typing import Any, Literal

from django.http import HttpRequest, HttpResponse
from ninja import Field, Router, Schema, Status
from pydantic import ConfigDict

from accounts.access import Actor
from accounts.models import Membership, Role
from core.errors import Forbidden
from workspaces import actions, history
from workspaces.access import access_workspace
from workspaces.changes import Change
from workspaces.models import Workspace
from workspaces.paths import clean_dir, clean_path
from workspaces.store import open_store

router = Router(tags=["workspaces"])


class Strict(Schema):
    model_config = ConfigDict(extra="forbid")


class WorkspaceIn(Strict):
    name: str = Field(max_length=100)
    slug: str | None = Field(None, max_length=30)
    template: str | None = None


class ChangeIn(Strict):
    op: Literal["write", "delete", "rename"]
    path: str = Field(max_length=4096)
    content: str | None = None
    encoding: Literal["utf-8", "base64"] = "utf-8"
    to: str | None = Field(None, max_length=4096)


class CommitIn(Strict):
    branch: str | None = None
    message: str = Field(max_length=10_000)
    base_commit: str | None = Field(None, pattern=r"^[0-9a-f]{40}$")
    changes: list[ChangeIn] = Field(max_length=1000)


class FileIn(Strict):
    content: str
    encoding: Literal["utf-8", "base64"] = "utf-8"
    message: str | None = Field(None, max_length=10_000)
    branch: str | None = None
    base_commit: str | None = Field(None, pattern=r"^[0-9a-f]{40}$")


class BranchIn(Strict):
    name: str = Field(max_length=200)
    from_ref: str | None = Field(None, alias="from")


def actor_of(request: HttpRequest) -> Actor:
    return request.auth  # type: ignore[attr-defined]


def workspace_for(request: HttpRequest, slug: str, scope: str) -> Workspace:
    actor = actor_of(request)
    assert actor.token is not None
    return access_workspace(actor, actor.token.team, slug, scope)


def workspace_out(request: HttpRequest, w: Workspace) -> dict[str, Any]:
    with open_store(w) as store:
        head = store.branch_head(w.default_branch)
    base = request.build_absolute_uri("/")[:-1]
    return {
        "id": w.public_id,
        "slug": w.slug,
        "name": w.name,
        "team": w.team.slug,
        "default_branch": w.default_branch,
        "template": w.template or None,
        "head": head,
        "created_at": w.created_at,
        "git_url": f"{base}/git/{w.team.slug}/{w.slug}.git",
        "web_url": f"{base}/t/{w.team.slug}/w/{w.slug}/",
    }


def to_change(c: ChangeIn) -> Change:
    if c.op == "write":
        if c.content is None:
            from core.errors import Invalid

            raise Invalid(f"A write of {c.path!r} needs content.", {"path": c.path})
        return Change("write", c.path, actions.decode_content(c.content, c.encoding, c.path))
    return Change(c.op, c.path, to=c.to)


def commit_out(result: actions.CommitResult) -> dict[str, Any]:
    return {
        "commit": result.sha,
        "branch": result.branch,
        "parent": result.parent,
        "files": result.files,
        "warnings": result.warnings,
    }


@router.get("/workspaces", summary="List the team's workspaces")
def list_workspaces(request: HttpRequest) -> list[dict[str, Any]]:
    actor = actor_of(request)
    assert actor.token is not None
    actor.require_scope("workspace:read")
    qs = Workspace.objects.filter(team=actor.token.team).select_related("team")
    if actor.token.workspaces:
        qs = qs.filter(slug__in=actor.token.workspaces)
    return [workspace_out(request, w) for w in qs]


@router.post(
    "/workspaces",
    response={201: dict[str, Any]},
    summary="Create a workspace, empty or from a template",
)
def create_workspace(request: HttpRequest, body: WorkspaceIn) -> Status:
    actor = actor_of(request)
    assert actor.token is not None
    actor.require_scope("workspace:write")
    w = actions.create_workspace(actor.token.team, actor, body.name, body.slug, body.template)
    return Status(201, workspace_out(request, w))


@router.get("/workspaces/{slug}", summary="One workspace")
def get_workspace(request: HttpRequest, slug: str) -> dict[str, Any]:
    return workspace_out(request, workspace_for(request, slug, "workspace:read"))


@router.delete("/workspaces/{slug}", summary="Delete a workspace and its repository (admins)")
def delete_workspace(request: HttpRequest, slug: str) -> HttpResponse:
    w = workspace_for(request, slug, "workspace:write")
    actor = actor_of(request)
    if not Membership.objects.filter(team=w.team, user=actor.user, role=Role.ADMIN).exists():
        raise Forbidden("Only an admin of the team may delete a workspace.")
    actions.delete_workspace(w, actor)
    return HttpResponse(status=204)


@router.get("/workspaces/{slug}/tree", summary="A folder at a ref")
def tree(
    request: HttpRequest, slug: str, ref: str | None = None, path: str | None = None
) -> dict[str, Any]:
    w = workspace_for(request, slug, "workspace:read")
    folder = clean_dir(path)
    with open_store(w) as store:
        commit = store.resolve(ref or w.default_branch)
        return {
            "ref": ref or w.default_branch,
            "commit": commit,
            "path": folder,
            "entries": store.list_dir(commit, folder),
        }


@router.get(
    "/workspaces/{slug}/files/{path:path}",
    summary="Read a file at a ref",
    description="JSON with content and encoding, or the raw bytes with "
    "`Accept: application/octet-stream`.",
)
def read_file(request: HttpRequest, slug: str, path: str, ref: str | None = None) -> Any:
    w = workspace_for(request, slug, "workspace:read")
    path = clean_path(path)
    with open_store(w) as store:
        commit = store.resolve(ref or w.default_branch)
        info = history.read_file(store, commit, path)
    raw = info.pop("raw", None)
    if "application/octet-stream" in request.headers.get("Accept", "") and raw is not None:
        response = HttpResponse(raw, content_type="application/octet-stream")
        response["X-Berth-Commit"] = commit
        response["Content-Disposition"] = "attachment"
        return response
    return info


@router.put("/workspaces/{slug}/files/{path:path}", summary="Write one file (one commit)")
def write_file(request: HttpRequest, slug: str, path: str, body: FileIn) -> dict[str, Any]:
    w = workspace_for(request, slug, "workspace:write")
    content = actions.decode_content(body.content, body.encoding, path)
    result = actions.commit_changes(
        w,
        actor_of(request),
        [Change("write", path, content)],
        body.message or f"Update {path}",
        body.branch,
        body.base_commit,
    )
    return commit_out(result)


@router.delete("/workspaces/{slug}/files/{path:path}", summary="Delete one file (one commit)")
def delete_file(
    request: HttpRequest,
    slug: str,
    path: str,
    message: str | None = None,
    branch: str | None = None,
    base_commit: str | None = None,
) -> dict[str, Any]:
    w = workspace_for(request, slug, "workspace:write")
    result = actions.commit_changes(
        w,
        actor_of(request),
        [Change("delete", path)],
        message or f"Delete {path}",
        branch,
        base_commit,
    )
    return commit_out(result)


@router.post(
    "/workspaces/{slug}/commits",
    response={201: dict[str, Any]},
    summary="Change files as one commit",
)
def create_commit(request: HttpRequest, slug: str, body: CommitIn) -> Status:
    w = workspace_for(request, slug, "workspace:write")
    changes = [to_change(c) for c in body.changes]
    result = actions.commit_changes(
        w, actor_of(request), changes, body.message, body.branch, body.base_commit
    )
    return Status(201, commit_out(result))


@router.get("/workspaces/{slug}/commits", summary="History of a branch or a path")
def list_commits(
    request: HttpRequest,
    slug: str,
    branch: str | None = None,
    path: str | None = None,
    page: int = 1,
    per_page: int = 30,
) -> dict:
    w = workspace_for(request, slug, "workspace:read")
    with open_store(w) as store:
        commit = store.resolve(branch or w.default_branch)
        return history.history(store, commit, clean_dir(path), page, per_page)


@router.get("/workspaces/{slug}/commits/{sha}", summary="One commit with its diff")
def get_commit(request: HttpRequest, slug: str, sha: str) -> dict[str, Any]:
    w = workspace_for(request, slug, "workspace:read")
    with open_store(w) as store:
        return history.commit_detail(store, history.require_commit(store, sha))


@router.get("/workspaces/{slug}/compare", summary="Diff between two refs")
def compare(request: HttpRequest, slug: str, base: str, head: str) -> dict[str, Any]:
    w = workspace_for(request, slug, "workspace:read")
    with open_store(w) as store:
        return history.compare(store, store.resolve(base), store.resolve(head))


@router.get("/workspaces/{slug}/branches", summary="Branches")
def list_branches(request: HttpRequest, slug: str) -> list[dict[str, Any]]:
    w = workspace_for(request, slug, "workspace:read")
    with open_store(w) as store:
        return [
            {"name": name, "commit": sha, "default": name == w.default_branch}
            for name, sha in sorted(store.branches().items())
        ]


@router.post(
    "/workspaces/{slug}/branches",
    response={201: dict[str, Any]},
    summary="Create a branch from a ref",
)
def create_branch(request: HttpRequest, slug: str, body: BranchIn) -> Status:
    w = workspace_for(request, slug, "workspace:write")
    sha = actions.create_branch(w, actor_of(request), body.name, body.from_ref)
    return Status(201, {"name": body.name, "commit": sha, "default": False})


@router.delete("/workspaces/{slug}/branches/{path:name}", summary="Delete a branch")
def delete_branch(request: HttpRequest, slug: str, name: str) -> HttpResponse:
    w = workspace_for(request, slug, "workspace:write")
    actions.delete_branch(w, actor_of(request), name)
    return HttpResponse(status=204)
