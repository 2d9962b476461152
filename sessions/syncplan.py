"""What a session's sync brings, read from Git on the web host (runner hosts, part 2:
a runner host never opens a workspace's store; docs/hosts.md): the files a branch
changed from the commit the session's files were last brought to (its base) to a
pending sync's commit, in batches as the exec channel's `apply` takes them. Its runner
host's agent (sessions.applier) asks for them batch by batch through the internal API
(sessions.host_api) and hands them to the sandbox.

1. The two commits' trees are compared (dulwich's tree_changes): each file the branch
   changed becomes an item with the blob id the session should still have (`base`).
   Deletions go first, so a file may become a folder and a folder a file.
2. Items go in batches of at most BATCH_BYTES of content each (one larger file alone);
   a file too large for any request is refused, a conflict of its own.
"""

import base64
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from dulwich.diff_tree import tree_changes
from dulwich.errors import MissingCommitError
from dulwich.objects import ObjectID

from core.errors import NotFound
from sessions.models import Session
from workspaces.gitstore import MODE_LINK, MODE_SUBMODULE, GitStore
from workspaces.store import open_store

BATCH_BYTES = 1 << 20
BATCH_FILES = 500
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


class Unreadable(Exception):
    """A commit of the sync is not in the store (nothing of it can be applied)."""


def plan(session: Session, base: str, target: str) -> list[Item]:
    """What the branch changed from `base` to `target`, file by file (links as links;
    submodules never reach /workspace). A target the session already has past (a
    sync announced late) is nothing to do, unless the branch was rewound to it."""
    with open_store(session.workspace) as store:
        try:
            if base == target or _stale(store, session.ref, base, target):
                return []
            old = store.commit(base).tree if base else None
            new = store.commit(target).tree
        except (KeyError, ValueError, NotFound, MissingCommitError) as e:
            raise Unreadable(f"the commit cannot be read ({e})") from None
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


@dataclass
class Batch:
    files: list[dict[str, Any]]  # as the channel's `apply` takes them
    refused: list[dict[str, str]]  # too large for any request: [{path, why}]
    # The version each path of this batch should still have, for a conflict's record.
    bases: dict[str, dict[str, Any] | None]
    next: int  # where the next batch starts
    total: int  # items in the whole sync


# Plans made for a sync's first batch, kept for the batches after it: a sync of 10,000
# files in 500-file batches would otherwise diff the two trees 20 times.
_PLANS: "OrderedDict[tuple[int, str, str], list[Item]]" = OrderedDict()
_PLANS_KEPT = 16
_plans_lock = threading.Lock()


def _plan_for(session: Session, base: str, target: str, at: int) -> list[Item]:
    """The sync's plan: made afresh for its first batch (at 0: what the branch holds
    now), the same one for the rest. One not kept (daphne restarted, or 16 syncs since)
    is made again from what the branch holds then: the same, unless the branch was
    rewound meanwhile."""
    key = (session.pk, base, target)
    with _plans_lock:
        items = _PLANS.get(key) if at > 0 else None
    if items is None:
        items = plan(session, base, target)
        with _plans_lock:
            _PLANS[key] = items
            _PLANS.move_to_end(key)
            while len(_PLANS) > _PLANS_KEPT:
                _PLANS.popitem(last=False)
    return items


def batch_at(session: Session, base: str, target: str, at: int) -> Batch:
    """The batch of the sync from `base` to `target` that starts at item `at`."""
    items = _plan_for(session, base, target, at)
    files, refused, after = _batch(session, items, at)
    bases = {
        item.path: ({"mode": item.base_mode, "sha": item.base} if item.base is not None else None)
        for item in items[at:after]
    }
    return Batch(files, refused, bases, after, len(items))
