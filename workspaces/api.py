"""JSON API doors onto workspaces (thin: access, then an action or a read)."""

from django.http import HttpRequest, HttpResponse
from ninja import Router, Status

from accounts.access import Actor
from accounts.models import Membership, Role
from core.errors import Forbidden, Invalid
from core.schemas import answers
from workspaces import actions, history, search
from workspaces.access import access_workspace
from workspaces.changes import Change
from workspaces.models import Workspace
from workspaces.paths import clean_dir, clean_path
from workspaces.schemas import (
    BranchIn,
    BranchOut,
    ChangeIn,
    CommitDetail,
    CommitIn,
    CommitOut,
    CompareOut,
    FileIn,
    FileOut,
    FolderRenameIn,
    HistoryOut,
    SearchOut,
    TreeOut,
    WorkspaceIn,
    WorkspaceOut,
)
from workspaces.store import open_store

router = Router(tags=["workspaces"])


def actor_of(request: HttpRequest) -> Actor:
    return request.auth  # type: ignore[attr-defined]


def workspace_for(request: HttpRequest, slug: str, scope: str) -> Workspace:
    actor = actor_of(request)
    assert actor.token is not None
    return access_workspace(actor, actor.token.team, slug, scope)


def workspace_out(request: HttpRequest, w: Workspace) -> WorkspaceOut:
    return WorkspaceOut.of(w)


def to_change(c: ChangeIn) -> Change:
    if c.op == "write":
        if c.content is None:
            raise Invalid(f"A write of {c.path!r} needs content.", {"path": c.path})
        return Change("write", c.path, actions.decode_content(c.content, c.encoding, c.path))
    return Change(c.op, c.path, to=c.to)


@router.get(
    "/workspaces", response=answers(list[WorkspaceOut], 403), summary="List the team's workspaces"
)
def list_workspaces(request: HttpRequest) -> list[WorkspaceOut]:
    actor = actor_of(request)
    assert actor.token is not None
    actor.require_scope("workspace:read")
    qs = Workspace.objects.filter(team=actor.token.team).select_related("team")
    if actor.token.workspaces:
        qs = qs.filter(slug__in=actor.token.workspaces)
    return [workspace_out(request, w) for w in qs]


@router.post(
    "/workspaces",
    response=answers(WorkspaceOut, 403, 409, 422, status=201),
    summary="Create a workspace, empty or from a template",
)
def create_workspace(request: HttpRequest, body: WorkspaceIn) -> Status:
    actor = actor_of(request)
    assert actor.token is not None
    actor.require_scope("workspace:write")
    w = actions.create_workspace(actor.token.team, actor, body.name, body.slug, body.template)
    return Status(201, workspace_out(request, w))


@router.get("/workspaces/{slug}", response=answers(WorkspaceOut, 403, 404), summary="One workspace")
def get_workspace(request: HttpRequest, slug: str) -> WorkspaceOut:
    return workspace_out(request, workspace_for(request, slug, "workspace:read"))


@router.delete(
    "/workspaces/{slug}",
    response=answers(None, 403, 404, status=204),
    summary="Delete a workspace and its repository (admins)",
)
def delete_workspace(request: HttpRequest, slug: str) -> HttpResponse:
    w = workspace_for(request, slug, "workspace:write")
    actor = actor_of(request)
    if not Membership.objects.filter(team=w.team, user=actor.user, role=Role.ADMIN).exists():
        raise Forbidden("Only an admin of the team may delete a workspace.")
    actions.delete_workspace(w, actor)
    return HttpResponse(status=204)


@router.get(
    "/workspaces/{slug}/tree",
    response=answers(TreeOut, 403, 404, 422),
    summary="A folder at a ref",
)
def tree(
    request: HttpRequest, slug: str, ref: str | None = None, path: str | None = None
) -> TreeOut:
    w = workspace_for(request, slug, "workspace:read")
    folder = clean_dir(path)
    with open_store(w) as store:
        commit = store.resolve(ref or w.default_branch)
        return TreeOut.model_validate(
            {
                "ref": ref or w.default_branch,
                "commit": commit,
                "path": folder,
                "entries": store.list_dir(commit, folder),
            }
        )


@router.get(
    "/workspaces/{slug}/files/{path:path}",
    response=answers(FileOut, 403, 404, 422),
    # `target` only for a symlink, as the file reads it (history.read_file).
    exclude_unset=True,
    summary="Read a file at a ref",
    description="JSON with content and encoding, or the raw bytes with "
    "`Accept: application/octet-stream`.",
    openapi_extra={
        "responses": {
            200: {
                "content": {
                    "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
                }
            }
        }
    },
)
def read_file(
    request: HttpRequest, slug: str, path: str, ref: str | None = None
) -> FileOut | HttpResponse:
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
    return FileOut.model_validate(info)


@router.get(
    "/workspaces/{slug}/search",
    response=answers(SearchOut, 403, 404, 413, 422),
    summary="Search the files of a commit",
    description="Literal text by default, a regular expression with `regex=true` (RE2's "
    "syntax: no backreferences or lookaround, `\\w` `\\d` `\\b` ASCII; 422 `invalid_regex`, "
    "or `regex_too_large` for counted repeats past 1,000); `case` "
    "smart (insensitive unless the query has a capital), sensitive or insensitive; `paths`: "
    "comma-separated globs (`*.py`, `src/`, `docs/**/*.md`). One line per match, in tree "
    "order. Binary files and files past `limits.max_file_bytes` are skipped and named; a "
    "search stops at `limit` lines, its scan bound or its time bound with `truncated`. A "
    "line past `limits.max_line_bytes` is searched up to there (`lines_cut`).",
)
def search_files(
    request: HttpRequest,
    slug: str,
    q: str,
    ref: str | None = None,
    regex: bool = False,
    case: search.Case = "smart",
    paths: str | None = None,
    limit: int | None = None,
) -> SearchOut:
    w = workspace_for(request, slug, "workspace:read")
    query = search.Query(q, regex, case, paths, limit)
    search.compile_query(query)  # bad input is 422 before the repository is opened
    with open_store(w) as store:
        commit = store.resolve(ref or w.default_branch)
        found = search.search(store, commit, query)
    return SearchOut.model_validate({"ref": ref or w.default_branch, **found})


def _commit_one(
    request: HttpRequest,
    w: Workspace,
    change: Change,
    message: str,
    branch: str | None,
    base_commit: str | None,
) -> CommitOut:
    """One change as one commit: the single-file and folder doors."""
    result = actions.commit_changes(w, actor_of(request), [change], message, branch, base_commit)
    return CommitOut.of(result)


@router.put(
    "/workspaces/{slug}/files/{path:path}",
    response=answers(CommitOut, 403, 404, 409, 422),
    summary="Write one file (one commit)",
)
def write_file(request: HttpRequest, slug: str, path: str, body: FileIn) -> CommitOut:
    w = workspace_for(request, slug, "workspace:write")
    content = actions.decode_content(body.content, body.encoding, path)
    change = Change("write", path, content)
    return _commit_one(
        request, w, change, body.message or f"Update {path}", body.branch, body.base_commit
    )


@router.delete(
    "/workspaces/{slug}/files/{path:path}",
    response=answers(CommitOut, 403, 404, 409, 422),
    summary="Delete one file (one commit)",
)
def delete_file(
    request: HttpRequest,
    slug: str,
    path: str,
    message: str | None = None,
    branch: str | None = None,
    base_commit: str | None = None,
) -> CommitOut:
    w = workspace_for(request, slug, "workspace:write")
    change = Change("delete", path, kind="file")
    return _commit_one(request, w, change, message or f"Delete {path}", branch, base_commit)


@router.post(
    "/workspaces/{slug}/folders/rename",
    response=answers(CommitOut, 403, 404, 409, 422),
    summary="Rename (move) a folder with everything in it (one commit)",
)
def rename_folder(request: HttpRequest, slug: str, body: FolderRenameIn) -> CommitOut:
    w = workspace_for(request, slug, "workspace:write")
    change = Change("rename", body.path, to=body.to, kind="folder")
    message = body.message or f"Rename folder {body.path} to {body.to}"
    return _commit_one(request, w, change, message, body.branch, body.base_commit)


@router.delete(
    "/workspaces/{slug}/folders/{path:path}",
    response=answers(CommitOut, 403, 404, 409, 422),
    summary="Delete a folder with everything in it (one commit)",
)
def delete_folder(
    request: HttpRequest,
    slug: str,
    path: str,
    message: str | None = None,
    branch: str | None = None,
    base_commit: str | None = None,
) -> CommitOut:
    w = workspace_for(request, slug, "workspace:write")
    change = Change("delete", path, kind="folder")
    return _commit_one(request, w, change, message or f"Delete folder {path}", branch, base_commit)


@router.post(
    "/workspaces/{slug}/commits",
    response=answers(CommitOut, 403, 404, 409, 422, status=201),
    summary="Change files as one commit",
)
def create_commit(request: HttpRequest, slug: str, body: CommitIn) -> Status:
    w = workspace_for(request, slug, "workspace:write")
    changes = [to_change(c) for c in body.changes]
    result = actions.commit_changes(
        w, actor_of(request), changes, body.message, body.branch, body.base_commit
    )
    return Status(201, CommitOut.of(result))


@router.get(
    "/workspaces/{slug}/commits",
    response=answers(HistoryOut, 403, 404, 422),
    summary="History of a branch or a path",
)
def list_commits(
    request: HttpRequest,
    slug: str,
    branch: str | None = None,
    path: str | None = None,
    page: int = 1,
    per_page: int = 30,
) -> HistoryOut:
    w = workspace_for(request, slug, "workspace:read")
    with open_store(w) as store:
        commit = store.resolve(branch or w.default_branch)
        return HistoryOut.model_validate(
            history.history(store, commit, clean_dir(path), page, per_page)
        )


@router.get(
    "/workspaces/{slug}/commits/{sha}",
    response=answers(CommitDetail, 403, 404, 422),
    exclude_unset=True,  # `submodule` only on a submodule's diff (history.diff_trees)
    summary="One commit with its diff",
)
def get_commit(request: HttpRequest, slug: str, sha: str) -> CommitDetail:
    w = workspace_for(request, slug, "workspace:read")
    with open_store(w) as store:
        return CommitDetail.model_validate(
            history.commit_detail(store, history.require_commit(store, sha))
        )


@router.get(
    "/workspaces/{slug}/compare",
    response=answers(CompareOut, 403, 404, 422),
    exclude_unset=True,  # as get_commit
    summary="Diff between two refs",
)
def compare(request: HttpRequest, slug: str, base: str, head: str) -> CompareOut:
    w = workspace_for(request, slug, "workspace:read")
    with open_store(w) as store:
        return CompareOut.model_validate(
            history.compare(store, store.resolve(base), store.resolve(head))
        )


@router.get(
    "/workspaces/{slug}/branches",
    response=answers(list[BranchOut], 403, 404),
    summary="Branches",
)
def list_branches(request: HttpRequest, slug: str) -> list[BranchOut]:
    w = workspace_for(request, slug, "workspace:read")
    with open_store(w) as store:
        return [
            BranchOut(name=name, commit=sha, default=name == w.default_branch)
            for name, sha in sorted(store.branches().items())
        ]


@router.post(
    "/workspaces/{slug}/branches",
    response=answers(BranchOut, 403, 404, 409, 422, status=201),
    summary="Create a branch from a ref",
)
def create_branch(request: HttpRequest, slug: str, body: BranchIn) -> Status:
    w = workspace_for(request, slug, "workspace:write")
    sha = actions.create_branch(w, actor_of(request), body.name, body.from_ref)
    return Status(201, BranchOut(name=body.name, commit=sha, default=False))


@router.delete(
    "/workspaces/{slug}/branches/{path:name}",
    response=answers(None, 403, 404, 409, status=204),
    summary="Delete a branch",
)
def delete_branch(request: HttpRequest, slug: str, name: str) -> HttpResponse:
    w = workspace_for(request, slug, "workspace:write")
    actions.delete_branch(w, actor_of(request), name)
    return HttpResponse(status=204)
