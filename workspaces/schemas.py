"""The contract of workspaces: workspaces, their files, commits, branches and diffs, as
the JSON API and the MCP tools both answer them (core.schemas)."""

from datetime import datetime
from typing import Any, Literal

from pydantic import ConfigDict, Field

from core.links import absolute
from core.schemas import ErrorObject, In, Out
from workspaces.actions import CommitResult
from workspaces.models import Workspace
from workspaces.signals import Follower
from workspaces.store import open_store

# -- requests ---------------------------------------------------------------------------


class WorkspaceIn(In):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"name": "Shop", "template": "python-http"}]}
    )

    name: str = Field(max_length=100)
    slug: str | None = Field(None, max_length=30)
    template: str | None = Field(
        None, description='a starter: "python-http", "node-http" or "static-site"'
    )


class ChangeIn(In):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"op": "write", "path": "NOTES.md", "content": "# Notes\n"}]
        }
    )

    op: Literal["write", "delete", "rename"] = Field(
        description="delete and rename act on what the path names: a file, or a folder "
        "with everything in it"
    )
    path: str = Field(max_length=4096)
    content: str | None = Field(None, description="the new content (op write)")
    encoding: Literal["utf-8", "base64"] = "utf-8"
    to: str | None = Field(None, max_length=4096, description="the new path (op rename)")


class FolderRenameIn(In):
    model_config = ConfigDict(json_schema_extra={"examples": [{"path": "docs", "to": "guides"}]})

    path: str = Field(max_length=4096, description="the folder to rename")
    to: str = Field(max_length=4096, description="its new path; nothing may be there")
    message: str | None = Field(None, max_length=10_000)
    branch: str | None = None
    base_commit: str | None = Field(
        None,
        pattern=r"^[0-9a-f]{40}$",
        description="the commit the rename was decided from: if the branch changed "
        "anything in the folder since, the rename is 409 `conflict`",
    )


class CommitIn(In):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "message": "Add notes",
                    "changes": [{"op": "write", "path": "NOTES.md", "content": "# Notes\n"}],
                }
            ]
        }
    )

    branch: str | None = None
    message: str = Field(max_length=10_000)
    base_commit: str | None = Field(
        None,
        pattern=r"^[0-9a-f]{40}$",
        description="the commit the change was made from (read_file's `commit`): what "
        "the branch got since is kept, text changed in separate places is merged, and "
        "an overlap is 409 `conflict` with what this write would undo; without it the "
        "write applies to the head as it is",
    )
    changes: list[ChangeIn] = Field(max_length=1000)


class FileIn(In):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"content": "# Notes\n", "message": "Add notes"}]}
    )

    content: str
    encoding: Literal["utf-8", "base64"] = "utf-8"
    message: str | None = Field(None, max_length=10_000)
    branch: str | None = None
    base_commit: str | None = Field(
        None,
        pattern=r"^[0-9a-f]{40}$",
        description="the commit the change was made from (read_file's `commit`): what "
        "the branch got since is kept, text changed in separate places is merged, and "
        "an overlap is 409 `conflict` with what this write would undo; without it the "
        "write applies to the head as it is",
    )


class BranchIn(In):
    model_config = ConfigDict(json_schema_extra={"examples": [{"name": "feature", "from": "main"}]})

    name: str = Field(max_length=200)
    from_ref: str | None = Field(None, alias="from")


# -- workspaces -------------------------------------------------------------------------


class WorkspaceOut(Out):
    id: str
    slug: str
    name: str
    team: str
    default_branch: str
    template: str | None
    head: str | None = Field(description="the default branch's head commit")
    created_at: datetime
    git_url: str
    web_url: str = Field(description="where a person sees it in Berth")

    @classmethod
    def of(cls, w: Workspace) -> "WorkspaceOut":
        with open_store(w) as store:
            head = store.branch_head(w.default_branch)
        return cls(
            id=w.public_id,
            slug=w.slug,
            name=w.name,
            team=w.team.slug,
            default_branch=w.default_branch,
            template=w.template or None,
            head=head,
            created_at=w.created_at,
            # Under APP_URL, not the asking request's origin: the same on every door
            # (MCP's answers name no origin), and right behind a proxy.
            git_url=w.git_url,
            web_url=absolute(f"/t/{w.team.slug}/w/{w.slug}/"),
        )


class WorkspaceList(Out):
    workspaces: list[WorkspaceOut]


class BranchOut(Out):
    name: str
    commit: str
    default: bool


# -- files ------------------------------------------------------------------------------


class EntryOut(Out):
    name: str
    path: str
    type: Literal["file", "dir", "symlink", "submodule"]
    mode: str
    sha: str
    size: int | None = Field(description="bytes (files and symlinks)")


class TreeOut(Out):
    ref: str
    commit: str
    path: str
    entries: list[EntryOut]


class FileOut(Out):
    path: str
    commit: str = Field(description="the commit read: the base_commit of a later write")
    sha: str
    mode: str
    type: Literal["file", "symlink", "submodule"]
    size: int | None
    content: str | None
    encoding: Literal["utf-8", "base64"] | None
    target: str | None = Field(None, description="a symlink's target (never followed)")


class PathConflict(Out):
    path: str
    why: str


class FollowerOut(Out):
    """One session following the branch, and whether it has the write."""

    kind: str = Field(description="what follows the branch: session")
    id: str
    state: str = Field(
        description="applied (an exec started now sees the write), conflict (applied but "
        "for `conflicts`: files the session had changed too, left as it has them), "
        "frozen (applied on resume, before its next exec), starting (applied before its "
        "first exec), or pending (applied before its next exec)"
    )
    message: str
    conflicts: list[PathConflict]
    url: str | None = Field(description="its page in Berth")

    @classmethod
    def of(cls, follower: Follower) -> "FollowerOut":
        return cls(
            kind=follower.kind,
            id=follower.id,
            state=follower.state,
            message=follower.message,
            url=absolute(follower.url) if follower.url else None,
            conflicts=[PathConflict.model_validate(c) for c in follower.conflicts],
        )


class CommitOut(Out):
    """What a write made: one commit, and whether the sessions following its branch
    have it."""

    commit: str
    branch: str
    parent: str | None
    files: list[str]
    warnings: list[ErrorObject] = Field(
        description="what is wrong in what was committed (a workspace.toml runs refuse)"
    )
    followers: list[FollowerOut] = Field(
        description="the live sessions following the branch, each with the write or "
        "saying when it will have it"
    )
    merged: list[str] = Field(
        description="files written from a base_commit the branch had moved past, whose "
        "content was merged with the branch's changes since (read them back: what was "
        "committed is not what was sent)",
    )

    @classmethod
    def of(cls, result: CommitResult) -> "CommitOut":
        return cls(
            commit=result.sha,
            branch=result.branch,
            parent=result.parent,
            files=list(result.files),
            warnings=[ErrorObject.model_validate(w) for w in result.warnings],
            followers=[FollowerOut.of(f) for f in result.followers],
            merged=list(result.merged),
        )


# -- history and diffs ------------------------------------------------------------------


class AuthorOut(Out):
    name: str
    email: str


class CommitSummary(Out):
    sha: str
    message: str
    title: str
    author: AuthorOut
    authored_at: int = Field(description="seconds since the epoch")
    parents: list[str]


class HistoryOut(Out):
    commits: list[CommitSummary]
    page: int
    per_page: int
    has_more: bool


class FileDiff(Out):
    status: str = Field(description="added, deleted, modified, renamed or copied")
    path: str
    old_path: str | None
    additions: int
    deletions: int
    binary: bool
    too_large: bool
    patch: str = Field(description="unified diff; empty when binary or too large")
    submodule: bool = Field(False, description="a submodule's commit changed")


class DiffStats(Out):
    files: int
    additions: int
    deletions: int


class DiffOut(Out):
    files: list[FileDiff]
    stats: DiffStats


class ContractChangeOut(Out):
    """A change of the execution contract (workspaces.contract)."""

    kind: Literal["changed", "became_invalid", "became_valid", "still_invalid"]
    message: str
    section: str | None
    key: str | None
    old: Any
    new: Any


class CommitDetail(CommitSummary):
    diff: DiffOut
    contract_changes: list[ContractChangeOut]


class CommitRange(Out):
    base: str
    head: str
    commits: list[CommitSummary] = Field(description="what head has that base has not")


class CompareOut(CommitRange):
    diff: DiffOut


class FlatCompareOut(DiffOut, CommitRange):
    """A compare with the diff's files and stats at the top (MCP `diff`)."""


# -- search -----------------------------------------------------------------------------


class SearchMatch(Out):
    path: str
    line: int = Field(description="1-based")
    column: int = Field(description="1-based, in characters, where the first match begins")
    text: str = Field(description="the line (a long one cut around the match)")
    match_start: int = Field(description="where the match begins in `text`")
    match_end: int = Field(description="where it ends in `text` (at most the line's end)")


class SearchSkipped(Out):
    path: str
    reason: Literal["binary", "too_large"]
    size: int | None = Field(description="bytes (none when the same blob was named before)")


class SearchLimits(Out):
    limit: int = Field(description="the most lines this search would return")
    max_query_chars: int
    max_file_bytes: int = Field(description="larger files are skipped, and named")
    max_line_bytes: int = Field(description="a longer line is searched as if it ended there")
    max_matches: int
    max_scan_bytes: int
    time_s: float


class SearchOut(Out):
    """Lines of a commit's files that match, each line once, in tree order."""

    ref: str
    commit: str
    query: str
    regex: bool
    case: Literal["smart", "sensitive", "insensitive"]
    paths: str | None = Field(description="the path globs asked for")
    matches: list[SearchMatch]
    files_scanned: int
    files_matched: int
    bytes_scanned: int
    lines_cut: int = Field(
        description="lines past `limits.max_line_bytes`, searched only up to that bound"
    )
    skipped: list[SearchSkipped] = Field(description="the first files skipped (50 at most)")
    skipped_count: int
    truncated: bool = Field(description="the search stopped early: `stopped` says why")
    stopped: Literal["match_limit", "scan_limit", "time_limit"] | None
    took_ms: int
    limits: SearchLimits
