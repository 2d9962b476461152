"""Source in step with Git, on the runner agent's side: a session's files brought from
the commit they were last brought to (its base) to the commit of each pending
SessionSync, in order, through the exec channel's `apply` (a compare-and-swap per file,
as the sandbox user: sandbox/in_image/berth_files.py). Called by the keeper under the
session's lock, while the session is ready: before it hands it an exec, when it thaws
it, and when it first answers after a start.

1. The two commits' trees are compared (dulwich's tree_changes): each file the branch
   changed becomes an item with the blob id the session should still have (`base`).
   Deletions go first, so a file may become a folder and a folder a file.
2. Items go in requests of at most BATCH_BYTES of content each (one larger file alone).
3. The session records the commit as its base, and each file left in conflict with the
   base its own version had (Session.record_sync); the row gets its result, and the
   session's group a signal (the write's answer waits on it: sessions.sync).
"""

import base64
import logging
from dataclasses import dataclass
from typing import Any

from dulwich.diff_tree import tree_changes
from dulwich.objects import ObjectID

from core import fanout
from sandbox.loop import db, on_thread
from sessions.channel import ChannelError, ask, channel_of
from sessions.lifecycle import group_name
from sessions.models import Session, SessionSync, SyncState
from workspaces.gitstore import MODE_LINK, MODE_SUBMODULE, GitStore
from workspaces.store import open_store

log = logging.getLogger("berth.runner_agent")

BATCH_BYTES = 1 << 20
BATCH_FILES = 500
APPLY_TIMEOUT_S = 60.0
# The channel reads one request line of at most 16 MiB (berth_session.MAX_REQUEST).
MAX_ITEM_BYTES = (16 << 20) * 3 // 4 - (64 << 10)
ANCESTRY_LIMIT = 1000  # commits looked through to tell a stale sync from a rewind


@dataclass
class Item:
    path: str
    base: str | None  # the blob id the session should have (None: absent)
    base_mode: int | None
    new: bytes | None  # the branch's blob id (None: deleted)
    mode: int


def pending(session: Session) -> list[SessionSync]:
    return list(SessionSync.objects.filter(session=session, state=SyncState.PENDING))


def has_pending(session: Session) -> bool:
    return SessionSync.objects.filter(session=session, state=SyncState.PENDING).exists()


async def apply_pending(session: Session) -> None:
    """Every pending sync of the session, in order; a channel that does not answer
    leaves them pending (the keeper tries again, and before the next exec)."""
    for row in await db(pending)(session):
        await _apply(session, row)


async def _apply(session: Session, row: SessionSync) -> None:
    assert session.run is not None and session.run.sandbox is not None
    base = await db(
        lambda: Session.objects.values_list("base_commit", flat=True).get(pk=session.pk)
    )()
    try:
        items = await on_thread(plan)(session, base, row.commit)
    except Exception as e:  # a commit gone from the store: nothing can be applied
        log.warning("session %s: sync to %s not planned: %s", session.public_id, row.commit, e)
        failed = [{"path": "*", "why": f"nothing applied: the commit cannot be read ({e})"}]
        await db(_finish)(session, row, base, 0, failed, {}, [])
        return
    ns = await on_thread(channel_of)(session.run.sandbox)
    applied: list[str] = []
    conflicts: list[dict[str, str]] = []
    bases: dict[str, dict[str, Any] | None] = {}
    by_path = {i.path: i for i in items}
    at = 0
    while at < len(items):
        files, refused, at = await on_thread(_batch)(session, items, at)
        conflicts.extend(refused)
        if not files:
            continue
        answer = await ask(ns, {"op": "apply", "files": files}, timeout=APPLY_TIMEOUT_S)
        if not answer.get("ok"):
            raise ChannelError(f"the exec channel refused the files ({answer.get('error')})")
        applied.extend(str(p) for p in answer.get("applied") or [])
        conflicts.extend(
            {"path": str(c.get("path")), "why": str(c.get("why"))}
            for c in answer.get("conflicts") or []
        )
    for conflict in conflicts:
        item = by_path.get(conflict["path"])
        if item is not None:
            bases[item.path] = (
                {"mode": item.base_mode, "sha": item.base} if item.base is not None else None
            )
    await db(_finish)(session, row, row.commit, len(applied), conflicts, bases, applied)


def _finish(
    session: Session,
    row: SessionSync,
    commit: str,
    applied: int,
    conflicts: list[dict[str, str]],
    bases: dict[str, dict[str, Any] | None],
    settled: list[str],
) -> None:
    session.record_sync(commit, bases, settled)
    if row.finish(applied, conflicts):
        fanout.group_send(group_name(session.public_id), {"type": "session.synced"})


def plan(session: Session, base: str, target: str) -> list[Item]:
    """What the branch changed from `base` to `target`, file by file (links as links;
    submodules never reach /workspace). A target the session already has past (a
    sync announced late) is nothing to do, unless the branch was rewound to it."""
    with open_store(session.workspace) as store:
        if base == target or _stale(store, session.ref, base, target):
            return []
        old = store.commit(base).tree if base else None
        new = store.commit(target).tree
        removals, writes = [], []
        for change in tree_changes(store.repo.object_store, old, new):
            before, after = change.old, change.new
            if MODE_SUBMODULE in (before and before.mode, after and after.mode):
                continue  # a gitlink names another repository's commit: never placed
            if after is None:
                assert before is not None and before.path is not None
                removals.append(Item(before.path.decode(), _hex(before.sha), before.mode, None, 0))
            else:
                assert after.path is not None and after.mode is not None
                writes.append(
                    Item(
                        after.path.decode(),
                        _hex(before.sha) if before else None,
                        before.mode if before else None,
                        after.sha,
                        after.mode,
                    )
                )
    return removals + writes


def _hex(sha: bytes | None) -> str | None:
    return sha.decode() if sha else None


def _stale(store: GitStore, branch: str, base: str, target: str) -> bool:
    """Whether `target` is an ancestor of `base` that the branch no longer points at:
    two writes announced in the other order, the later one applied first."""
    if store.branch_head(branch) == target:
        return False
    walker = store.repo.get_walker(include=[ObjectID(base.encode())], max_entries=ANCESTRY_LIMIT)
    return any(entry.commit.id == target.encode() for entry in walker)


def _batch(
    session: Session, items: list[Item], at: int
) -> tuple[list[dict[str, Any]], list[dict[str, str]], int]:
    """The next request's files from `items[at:]` as the channel takes them (contents
    read from the store, at most BATCH_BYTES unless one file alone is more), the files
    too large for any request (refused here), and where the next request starts."""
    files: list[dict[str, Any]] = []
    refused: list[dict[str, str]] = []
    size = 0
    with open_store(session.workspace) as store:
        while at < len(items) and len(files) < BATCH_FILES:
            item = items[at]
            content = None
            if item.new is not None:
                data = store.blob(item.new)
                if files and size + len(data) > BATCH_BYTES:
                    break  # the next request's
                if len(data) > MAX_ITEM_BYTES:
                    refused.append(
                        {"path": item.path, "why": f"too large to sync ({len(data) >> 20} MB)"}
                    )
                    at += 1
                    continue
                content = base64.b64encode(data).decode()
                size += len(data)
            files.append(
                {
                    "path": item.path,
                    "base": item.base,
                    "base_mode": _mode(item.base_mode),
                    "content": content,
                    "mode": _mode(item.mode),
                }
            )
            at += 1
    return files, refused, at


def _mode(mode: int | None) -> str | None:
    if mode is None:
        return None
    return "120000" if mode == MODE_LINK else ("100755" if mode & 0o100 else "100644")
