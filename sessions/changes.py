"""A session's own changes: what its /workspace holds against the commit its files were
last brought to (its base), listed with a diff as a run's changes are (runs.outputs),
and committed on its branch by a three-way merge against the branch's head.

The files are read by the session's runner agent (sessions.snapshot: only the agent
enters a sandbox) into a tree in a scratch store of the read's own (sessions.snapstore,
which every reader of a read's tree opens it through); the doors ask for that read and
wait for it (sessions.waiting), then diff and merge trees here, as objects only.

The merge, per path the session changed (ours ≠ base):
1. The base is the session's base commit, except for a file a sync left in conflict:
   its base is the version the session's own copy was based on (Session.sync_conflicts),
   so a file the branch changed meanwhile can never be reverted by this commit.
2. Head still at the base: the session's version is taken. Head already equal to the
   session's: nothing to do. Otherwise both changed it: the commit is refused (409
   `merge_conflict`, naming the paths); nothing is written.
3. The merged tree is written into the read's scratch store and measured against every
   commit's caps and path rules there; only then do the objects the new commit needs
   and the workspace's store lacks (the session's new files, the folders above them)
   enter it, and the commit is made (GitStore.make_commit), all under the repository's
   write lock, and announced like any write (the sessions following the branch, this
   one included, get it before the answer). A refused commit adds nothing to the store.
A file holding the value of a secret the session's execs were granted is withheld: the
read keeps its base version, so it is never stored, diffed or committed.
"""

from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction
from dulwich.objects import ObjectID, ShaFile, Tree

from accounts.access import Actor
from accounts.actions import record
from core.errors import BerthError, Conflict, Invalid, MissingScope, NotFound
from runs import secrets
from runs.outputs import describe_changes, flatten
from sessions import snapstore
from sessions.actions import host_of, nudge, require_usable
from sessions.models import Session, SessionState, Snapshot, SnapshotState
from workspaces import contract_writes
from workspaces.changes import TreeEditor
from workspaces.gitstore import MODE_SUBMODULE, MODE_TREE, GitStore
from workspaces.paths import clean_path
from workspaces.signals import Follower, announce_branch_moved
from workspaces.store import author_of, open_store
from workspaces.treesize import check_tree


@dataclass
class SessionCommit:
    sha: str
    branch: str
    parent: str
    files: list[str]
    withheld: list[dict[str, Any]]
    skipped: list[dict[str, str]]
    followers: list[Follower] = field(default_factory=list)


def ask_read(session: Session, activity: bool = True) -> Snapshot:
    """A read of the session's files, for its agent to make (a frozen one resumes).
    `activity`: whether it restarts the idle clocks (a page that only looks does not:
    it must not keep a session from freezing)."""
    require_usable(session)
    if session.state == SessionState.STARTING:
        # Its files are there once it is ready (a start may wait on admission a while).
        raise Conflict(
            "The session is starting; its files can be read once it is ready (GET "
            f"/api/v1/sessions/{session.public_id}, or session_status), then ask again.",
            {"state": session.state},
            code="session_starting",
        )
    row = Snapshot.objects.create(session=session)
    if activity:
        session.touch()
    nudge(host_of(session))
    return row


def read_result(pk: int) -> Snapshot:
    """The read once made; typed when it was not (503) or could not be (409)."""
    row = Snapshot.objects.select_related("session__workspace").get(pk=pk)
    if row.state == SnapshotState.PENDING or row.unanswered:
        require_usable(row.session)  # it stopped meanwhile: typed, with what to call
        raise BerthError(
            row.error
            or f"The session's files were not read within {settings.SESSION_READ_WAIT_S} s "
            "(its runner agent is busy or down); try again.",
            code="session_not_read",
            status=503,
        )
    if row.state == SnapshotState.FAILED:
        raise Conflict(row.error, code="session_files_unreadable")
    return row


def describe(row: Snapshot) -> dict[str, Any]:
    """The read's changes against its base commit, as a run's are said, with the
    files a sync left in conflict."""
    session = row.session
    masker = secrets.Masker(secrets.values_for(session.workspace_id, session.secret_names))
    with snapstore.opened(row.scratch) as store:
        changes = describe_changes(
            store, store.commit(row.base_commit).tree, row.tree.encode(), masker
        )
    changes.update(skipped=row.skipped, skipped_count=row.skipped_count, withheld=row.withheld)
    return changes


def commit(
    row: Snapshot, actor: Actor, message: str | None, paths: list[str] | None
) -> SessionCommit:
    """The session's changes (all, or those at `paths`) as one commit on its branch."""
    session = row.session
    try:
        actor.require_scope("workspace:write")
    except MissingScope as e:
        raise MissingScope(
            "Committing a session's changes writes its branch, which needs the "
            "`workspace:write` scope; use a token that has it.",
            e.details,
        ) from None
    wanted = [clean_path(p.rstrip("/")) for p in paths] if paths is not None else None
    message = (message or "").strip() or f"Changes from session {session.public_id}"
    workspace, branch = session.workspace, session.ref
    with (
        open_store(workspace) as store,
        snapstore.opened(row.scratch) as scratch,
        store.write_lock(),
    ):
        head = store.branch_head(branch)
        if head is None:
            raise NotFound(f"No branch {branch!r}.", {"branch": branch}, code="branch_not_found")
        tree, files = _merge(store, scratch, session, row, head, wanted)
        _bring(scratch, store, tree)
        sha = store.make_commit(tree, [head], author_of(actor), message)
        store.advance(branch, head, sha)
        contract_writes.note(workspace, actor, store, [sha], [head])
    result = SessionCommit(sha, branch, head, files, row.withheld, row.skipped)
    # Committing a session's files approves nothing, whoever commits: its workspace.toml
    # may be what an agent wrote there (workspaces.review_editor.written_on_page is the
    # editor's alone); a widening is held when something asks for it.
    record(
        workspace.team,
        actor,
        "session.committed",
        f"commit:{sha[:12]}",
        workspace.slug,
        session=session.public_id,
        branch=branch,
        files=files[:20],
    )
    transaction.on_commit(
        lambda: result.followers.extend(announce_branch_moved(workspace, branch, sha, actor))
    )
    return result


def _merge(
    store: GitStore,
    scratch: GitStore,
    session: Session,
    row: Snapshot,
    head: str,
    wanted: list[str] | None,
) -> tuple[bytes, list[str]]:
    """The merged tree, written into the read's scratch store and checked there."""
    base = flatten(store, store.commit(row.base_commit).tree)
    for path, was in (session.sync_conflicts or {}).items():
        if was is None:
            base.pop(path, None)
        else:
            base[path] = (int(was["mode"]), str(was["sha"]).encode())
    ours = flatten(scratch, row.tree.encode())
    theirs = flatten(store, store.commit(head).tree)
    changed = sorted(
        p for p in set(ours) | set(base) if ours.get(p) != base.get(p) and _in(p, wanted)
    )
    if not changed:
        raise Invalid(
            "The session has no changes" + (" at these paths" if wanted else "") + " to commit.",
            code="no_changes",
        )
    overlaps = [p for p in changed if theirs.get(p) not in (base.get(p), ours.get(p))]
    editor = TreeEditor(scratch, store.commit(head).tree)
    for path in changed:
        if path in overlaps or theirs.get(path) == ours.get(path):
            continue
        try:
            editor.set_entry(path, ours.get(path))
        except Invalid:  # a file where the branch now has a folder, or the reverse
            overlaps.append(path)
    if overlaps:
        raise Conflict(
            f"The branch {session.ref!r} changed {len(overlaps)} of the files the session "
            f"changed too ({', '.join(overlaps[:10])}), so nothing was committed. Make the "
            "session's copies what they should be (read the branch's with read_file), or "
            "commit without these paths (`paths`).",
            {"paths": overlaps, "head": head, "base_commit": row.base_commit},
            code="merge_conflict",
        )
    tree = editor.write()
    if tree == store.commit(head).tree:
        raise Invalid(
            "The branch already holds the session's changes; nothing to commit.",
            code="no_changes",
        )
    check_tree(scratch.repo.object_store, tree)  # as make_commit will: nothing moved yet
    return tree, [p for p in changed if theirs.get(p) != ours.get(p)]


def _bring(scratch: GitStore, store: GitStore, tree: bytes) -> None:
    """Into the workspace's store, the objects of `tree` it lacks: a tree it holds
    holds everything below it, so only the new folders and files are walked. Written
    children first, so that stays true even when this is cut short."""
    order: list[ObjectID] = []
    todo = [(MODE_TREE, ObjectID(tree))]
    while todo:
        mode, sha = todo.pop()
        if mode == MODE_SUBMODULE or sha in store.repo.object_store:
            continue
        order.append(sha)
        if mode == MODE_TREE:
            node = scratch.repo[sha]
            assert isinstance(node, Tree)
            todo.extend((e.mode, e.sha) for e in node.iteritems())
    for sha in reversed(order):
        kind, raw = scratch.repo.object_store.get_raw(sha)
        store.repo.object_store.add_object(ShaFile.from_raw_string(kind, raw))


def _in(path: str, wanted: list[str] | None) -> bool:
    return wanted is None or any(path == w or path.startswith(w + "/") for w in wanted)


def _text_at(store: GitStore, sha: str, path: str) -> str | None:
    try:
        _, blob = store.lookup(sha, path)
    except NotFound:
        return None
    return store.blob(blob).decode("utf-8", "replace")
