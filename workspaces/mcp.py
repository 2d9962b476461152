"""MCP tools onto workspaces: who am I, workspaces, files, history, diffs. Thin doors:
the same access helper and actions as the JSON API (core.mcp registers them)."""

from channels.db import database_sync_to_async

from accounts.access import Actor
from accounts.auth import actor_of
from accounts.schemas import MeOut
from core.errors import Invalid
from core.mcp import Ctx, tool
from workspaces import actions, history, search
from workspaces.access import access_workspace
from workspaces.changes import Change
from workspaces.models import Workspace
from workspaces.paths import clean_dir, clean_path
from workspaces.review_access import access_review
from workspaces.review_schemas import ContractReviewOut
from workspaces.schemas import (
    ChangeIn,
    CommitOut,
    FileOut,
    FlatCompareOut,
    HistoryOut,
    SearchOut,
    TreeOut,
    WorkspaceList,
    WorkspaceOut,
)
from workspaces.store import open_store


def workspace_for(actor: Actor, slug: str, scope: str) -> Workspace:
    assert actor.token is not None
    return access_workspace(actor, actor.token.team, slug, scope)


@tool()
async def whoami(ctx: Ctx) -> MeOut:
    """Who this token is: its person, team, scopes and workspace limits. Instant. Call it
    first to learn which workspaces you may use (then list_workspaces)."""
    actor = await actor_of(ctx)
    assert actor.token is not None
    return await database_sync_to_async(MeOut.of)(actor.token)


@tool()
async def list_workspaces(ctx: Ctx) -> WorkspaceList:
    """The team's workspaces this token may use, with each one's head commit. Instant."""
    actor = await actor_of(ctx)

    def listed() -> list[WorkspaceOut]:
        assert actor.token is not None
        actor.require_scope("workspace:read")
        qs = Workspace.objects.filter(team=actor.token.team).select_related("team")
        if actor.token.workspaces:
            qs = qs.filter(slug__in=actor.token.workspaces)
        return [WorkspaceOut.of(w) for w in qs]

    return WorkspaceList(workspaces=await database_sync_to_async(listed)())


@tool()
async def create_workspace(
    ctx: Ctx, name: str, template: str | None = None, slug: str | None = None
) -> WorkspaceOut:
    """Create a workspace (a Git repository), empty or from a template: "python-http",
    "node-http" or "static-site" (each with a workspace.toml and passing tests). About a
    second. Next: list_files, or run_command to run its tests."""
    actor = await actor_of(ctx)

    def create() -> WorkspaceOut:
        assert actor.token is not None
        actor.require_scope("workspace:write")
        return WorkspaceOut.of(
            actions.create_workspace(actor.token.team, actor, name, slug, template)
        )

    return await database_sync_to_async(create)()


@tool()
async def list_files(ctx: Ctx, workspace: str, path: str = "", ref: str | None = None) -> TreeOut:
    """The entries of one folder at a branch, tag or commit (default: the default
    branch's head). Instant. Next: read_file."""
    actor = await actor_of(ctx)

    def listing() -> TreeOut:
        w = workspace_for(actor, workspace, "workspace:read")
        folder = clean_dir(path)
        with open_store(w) as store:
            commit = store.resolve(ref or w.default_branch)
            entries = store.list_dir(commit, folder)
        return TreeOut.model_validate(
            {"ref": ref or w.default_branch, "commit": commit, "path": folder, "entries": entries}
        )

    return await database_sync_to_async(listing)()


@tool()
async def read_file(ctx: Ctx, workspace: str, path: str, ref: str | None = None) -> FileOut:
    """One file at a ref: UTF-8 text, or base64 for binary content. Instant. The commit
    it returns is the base_commit to give write_files."""
    actor = await actor_of(ctx)

    def read() -> FileOut:
        w = workspace_for(actor, workspace, "workspace:read")
        clean = clean_path(path)
        with open_store(w) as store:
            commit = store.resolve(ref or w.default_branch)
            info = history.read_file(store, commit, clean)
        info.pop("raw", None)
        return FileOut.model_validate(info)

    return await database_sync_to_async(read)()


@tool()
async def search_files(
    ctx: Ctx,
    workspace: str,
    query: str,
    ref: str | None = None,
    regex: bool = False,
    case: search.Case = "smart",
    paths: str | None = None,
    limit: int | None = None,
) -> SearchOut:
    """Find lines in the files of a branch, tag or commit (default: the default branch's
    head), on the server: literal text, or a regular expression with regex=true (RE2: no
    backreferences or lookaround, \\w \\d \\b ASCII, counted repeats up to 1,000); case
    "smart" (insensitive unless the query has a capital), "sensitive" or "insensitive";
    paths: comma-separated globs ("*.py", "src/", "docs/**/*.md"). One result per line,
    with path, line and column. Binary and large files are skipped and named; a search
    that hits `limit` lines, its scan or time bound says `truncated` (narrow it with
    paths). Usually under a second. Next: read_file at a result's path."""
    actor = await actor_of(ctx)

    def find() -> SearchOut:
        w = workspace_for(actor, workspace, "workspace:read")
        asked = search.Query(query, regex, case, paths, limit)
        search.compile_query(asked)
        with open_store(w) as store:
            commit = store.resolve(ref or w.default_branch)
            found = search.search(store, commit, asked)
        return SearchOut.model_validate({"ref": ref or w.default_branch, **found})

    return await database_sync_to_async(find)()


@tool()
async def write_files(
    ctx: Ctx,
    workspace: str,
    changes: list[ChangeIn],
    message: str,
    base_commit: str | None = None,
    branch: str | None = None,
) -> CommitOut:
    """Write, delete and rename files as ONE commit on a branch (default: the default
    branch); a delete or rename of a folder's path moves or removes the folder with
    everything in it. Give base_commit (from read_file or a previous write) so a change made
    meanwhile by someone else is never overwritten: it is kept, a file both changed in
    separate places is merged (listed in `merged`: read it back), and a place both
    changed is a `conflict` whose details show their lines. Under a second. Next:
    run_command to test the new commit."""
    actor = await actor_of(ctx)

    def commit() -> CommitOut:
        w = workspace_for(actor, workspace, "workspace:write")
        if not changes:
            raise Invalid("Give at least one change.", {"field": "changes"})
        result = actions.commit_changes(
            w, actor, [_change(c) for c in changes], message, branch, base_commit
        )
        return CommitOut.of(result)

    return await database_sync_to_async(commit)()


def _change(c: ChangeIn) -> Change:
    if c.op == "write":
        if c.content is None:
            raise Invalid(f"A write of {c.path!r} needs content.", {"path": c.path})
        return Change("write", c.path, actions.decode_content(c.content, c.encoding, c.path))
    return Change(c.op, c.path, to=c.to)


@tool(name="history")
async def history_of(
    ctx: Ctx, workspace: str, path: str = "", limit: int = 20, ref: str | None = None
) -> HistoryOut:
    """Commits of a branch (default: the default branch), newest first; with `path`,
    only those touching it. Instant."""
    actor = await actor_of(ctx)

    def read() -> HistoryOut:
        w = workspace_for(actor, workspace, "workspace:read")
        with open_store(w) as store:
            commit = store.resolve(ref or w.default_branch)
            found = history.history(store, commit, clean_dir(path), 1, max(1, min(limit, 100)))
        return HistoryOut.model_validate(found)

    return await database_sync_to_async(read)()


@tool()
async def diff(ctx: Ctx, workspace: str, base: str, head: str) -> FlatCompareOut:
    """What `head` has that `base` does not (refs or commits): its commits and the
    per-file unified diffs. Instant."""
    actor = await actor_of(ctx)

    def compare() -> FlatCompareOut:
        w = workspace_for(actor, workspace, "workspace:read")
        with open_store(w) as store:
            out = history.compare(store, store.resolve(base), store.resolve(head))
        return FlatCompareOut.model_validate({**out, **out.pop("diff")})

    return await database_sync_to_async(compare)()


@tool()
async def get_contract_review(ctx: Ctx, id: str) -> ContractReviewOut:
    """A sandbox contract review, by the id a refused run_command, start_preview or
    request_deploy named (`contract_change_pending`): what widened, before and after,
    its state and who decided. Instant. Only a person approves it, on its page (`url`);
    when it is approved, ask again."""
    actor = await actor_of(ctx)
    return await database_sync_to_async(lambda: ContractReviewOut.of(access_review(actor, id)))()
