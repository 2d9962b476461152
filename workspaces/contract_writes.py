"""Who wrote a widening of `workspace.toml` (docs/security.md 30).

A contract review is opened by whatever asks for the widened contract first — often a
teammate's run, not the person who wrote the widening. A reviewer who widens the file
through the API, MCP, a session's commit or a push, then approves the review a
teammate's run opened, must not count as another person. So every door that brings
commits in records, for each new commit that changes the file, who was behind it
(`note`), and a review names the writers of the commits that brought its widening in
(`writers`); `workspaces.reviews.approve` counts none of them as independent.

Git's author line is not used: a push carries whatever name its writer typed.
"""

from dulwich.objects import ObjectID

from accounts.access import Actor
from core.errors import NotFound
from workspaces import config as workspace_config
from workspaces import contract
from workspaces.gitstore import GitStore
from workspaces.models import ContractWrite, Workspace

# A push of a long history walks every new commit once; past this many, a walk stops.
# Far above any honest push or widening's history, and the walk only reads root trees.
MAX_COMMITS = 20_000


def _blob(store: GitStore, sha: str) -> bytes | None:
    try:
        return store.lookup(sha, workspace_config.FILENAME)[1]
    except NotFound:
        return None


def _changes_file(store: GitStore, sha: str) -> bool:
    """Whether the commit wrote the file: it differs from every parent's (a merge that
    took one side's file as it was wrote nothing; one that resolved it did)."""
    blob = _blob(store, sha)
    parents = store.commit(sha).parents
    if not parents:
        return blob is not None
    return all(_blob(store, p.decode()) != blob for p in parents)


def note(
    workspace: Workspace, actor: Actor, store: GitStore, new: list[str], known: list[str]
) -> None:
    """Record `actor` as the writer of each commit reachable from `new` but not from
    `known` (what the repository had) that changes `workspace.toml`."""
    written = []
    walker = store.repo.get_walker(
        include=[ObjectID(n.encode()) for n in new],
        exclude=[ObjectID(k.encode()) for k in known if k],
        max_entries=MAX_COMMITS,
    )
    for entry in walker:
        sha = entry.commit.id.decode()
        if _changes_file(store, sha):
            written.append(
                ContractWrite(workspace=workspace, commit=sha, user=actor.user, token=actor.token)
            )
    ContractWrite.objects.bulk_create(written)


def writers(
    workspace: Workspace, store: GitStore, commit: str, baseline: contract.Values
) -> list[int]:
    """Who (their user ids) wrote the widening `commit`'s file asks for over `baseline`.

    1. From `commit`, walk back through the commits whose file still widens `baseline`
       (a commit whose file widens nothing ends that line: the widening came after it).
    2. Each of those that wrote the file (`_changes_file`) is a writer's commit.
    3. Their writers, as the doors recorded them (`note`)."""
    widens: dict[bytes | None, bool] = {}

    def still_widens(sha: str) -> bool:
        blob = _blob(store, sha)
        if blob not in widens:
            try:
                values = contract.asked(workspace_config.parse(contract.text_at(store, sha) or ""))
            except workspace_config.ConfigError:
                values = None  # an invalid file runs nothing, so it widens nothing
            widens[blob] = bool(
                values and contract.widenings(baseline, values, workspace.team.egress_ceiling)
            )
        return widens[blob]

    written: list[str] = []
    seen: set[str] = set()
    todo = [commit]
    while todo and len(seen) < MAX_COMMITS:
        sha = todo.pop()
        if sha in seen:
            continue
        seen.add(sha)
        if not still_widens(sha):
            continue
        if _changes_file(store, sha):
            written.append(sha)
        todo += [p.decode() for p in store.commit(sha).parents]
    rows = ContractWrite.objects.filter(workspace=workspace, commit__in=written)
    return sorted(set(rows.values_list("user_id", flat=True)))
