"""How big a tree really is: every path it expands to, counted with multiplicity.

A tree object may name the same subtree or blob many times. Seven tree objects that
each name the one below ten times expand to 10⁷ paths, and one 10 MB blob named 2,400
times to 24 GB, from a push of a few kilobytes. Whatever expands a tree — hydrating a
sandbox, diffing, building a release — would take that on, so every commit Berth
creates or accepts is measured here first (`check_tree`), and refused past the caps
(`WORKSPACE_MAX_TREE_ENTRIES`, `WORKSPACE_MAX_TREE_MB`).

Each tree object is read once: its figures are memoised by id (objects are immutable,
so the memo never goes stale), which makes a fan-out bomb cost as many reads as it has
objects, not as many as it has paths.
"""

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from dulwich.objects import Tree

from core.errors import BerthError
from workspaces.modes import MODE_LINK, MODE_SUBMODULE, MODE_TREE
from workspaces.paths import (
    MAX_DEPTH,
    MAX_PATH_BYTES,
    InvalidPath,
    check_entry_name,
    link_outside,
    link_reach,
)


@dataclass(frozen=True)
class Size:
    """What one tree expands to: paths (files, links, folders and submodules), bytes of
    file and link content, the deepest level, the longest path and the largest file
    below it."""

    entries: int
    bytes: int
    depth: int
    path_bytes: int
    largest: int
    # How many folders above this tree's own the furthest relative link in it climbs
    # (workspaces.paths.link_reach): past 0 at the root, a link climbs out of the tree.
    climb: int = 0


class TreeTooLarge(BerthError):
    status = 422
    code = "tree_too_large"


class FileTooLarge(BerthError):
    status = 413
    code = "file_too_large"


# Figures per tree id, kept across calls in this process (bounded: oldest dropped),
# with whether its names were checked too. Objects are immutable, so an entry never
# goes stale; request threads and the git pool share it, hence the lock.
_MEMO: OrderedDict[bytes, tuple[Size, bool]] = OrderedDict()
_MEMO_MAX = 200_000
# Blob sizes per id: one blob named a thousand times is read once.
_BLOBS: OrderedDict[bytes, int] = OrderedDict()
_BLOBS_MAX = 200_000
_LOCK = threading.Lock()


def limits() -> tuple[int, int]:
    return settings.WORKSPACE_MAX_TREE_ENTRIES, settings.WORKSPACE_MAX_TREE_BYTES


def measure(object_store: Any, tree_sha: bytes, names: bool = True) -> Size:
    """The tree's expanded figures against the caps (TreeTooLarge), stopping as soon as
    a subtree alone is past one, so a bomb is never expanded even in counts. With
    `names`, every name is checked with the path rules once per tree object
    (InvalidPath); hydration measures without them, so a name accepted before a rule
    existed never stops a run."""
    size = _measure(object_store, tree_sha, 0, *limits(), names)
    max_entries, max_bytes = limits()
    if size.entries > max_entries or size.bytes > max_bytes:  # memoised under other caps
        raise _too_large(size.entries, size.bytes)
    return size


def check_tree(object_store: Any, tree_sha: bytes, names: bool = True) -> Size:
    """`measure`, then the path rules and the file cap on the whole: what every door
    that creates a commit (push, file API, MCP, a run's changes) and hydration calls.
    With `names`, a symlink whose relative target climbs out of the tree is refused
    too (LinkOutsideTree); hydration skips such a link instead (workspaces.archive)."""
    size = measure(object_store, tree_sha, names)
    if names and size.climb > 0:
        raise link_outside(*links_out_of_tree(object_store, tree_sha)[0])
    if size.depth > MAX_DEPTH or size.path_bytes > MAX_PATH_BYTES:
        raise InvalidPath(
            f"A path in this tree is longer than {MAX_PATH_BYTES} bytes or "
            f"deeper than {MAX_DEPTH} folders.",
            {"maximum_depth": MAX_DEPTH, "maximum_bytes": MAX_PATH_BYTES},
        )
    limit = settings.WORKSPACE_MAX_FILE_BYTES
    if size.largest > limit:
        path = _path_of_large(object_store, tree_sha, limit)
        raise FileTooLarge(
            f"{path} is larger than {limit // 2**20} MB; keep large files out of the workspace.",
            {"path": path, "limit_bytes": limit},
        )
    return size


def links_out_of_tree(store: Any, sha: bytes, prefix: str = "") -> list[tuple[str, bytes]]:
    """The (path, target) of every symlink whose target climbs out of the tree: only
    into folders whose figures hold one, so a tree without any costs nothing more."""
    found: list[tuple[str, bytes]] = []
    depth = prefix.count("/")
    for entry in store[sha].iteritems():
        path = prefix + entry.path.decode("utf-8", "replace")
        if entry.mode == MODE_TREE:
            if measure(store, entry.sha, names=False).climb > depth + 1:
                found += links_out_of_tree(store, entry.sha, path + "/")
        elif entry.mode == MODE_LINK:
            target = store.get_raw(entry.sha)[1]
            if link_reach(target) > depth:
                found.append((path, target))
    return found


def _path_of_large(store: Any, sha: bytes, limit: int, prefix: str = "") -> str:
    """The first file past `limit`, for the message: only into folders whose figures
    hold one, so this never walks more than one path's worth of trees."""
    for entry in store[sha].iteritems():
        path = prefix + entry.path.decode("utf-8", "replace")
        if entry.mode == MODE_TREE:
            if measure(store, entry.sha, names=False).largest > limit:
                return _path_of_large(store, entry.sha, limit, path + "/")
        elif entry.mode != MODE_SUBMODULE and _blob_size(store, entry.sha, True) > limit:
            return path
    return prefix or "a file"


def _too_large(entries: int, nbytes: int) -> TreeTooLarge:
    max_entries, max_bytes = limits()
    return TreeTooLarge(
        f"This tree expands to more than {max_entries:,} paths or {max_bytes // 2**20:,} "
        "MB of files (a name repeated counts each time it appears); keep generated and "
        "vendored files out of the workspace.",
        {
            "entries_at_least": entries,
            "bytes_at_least": nbytes,
            "max_entries": max_entries,
            "max_bytes": max_bytes,
        },
    )


def _measure(
    store: Any, sha: bytes, depth: int, max_entries: int, max_bytes: int, names: bool
) -> Size:
    with _LOCK:
        known = _MEMO.get(sha)
        if known is not None and (known[1] or not names):
            _MEMO.move_to_end(sha)
            return known[0]
    if depth > MAX_DEPTH:  # deeper than any accepted path: the memo never sees it
        raise InvalidPath(
            f"This tree is nested deeper than {MAX_DEPTH} folders.", {"maximum_depth": MAX_DEPTH}
        )
    tree = store[sha]
    if not isinstance(tree, Tree):
        raise InvalidPath("A tree entry that should be a folder is not a tree.")
    entries = nbytes = deepest = longest = largest = climb = 0
    for entry in tree.iteritems():
        if names:
            try:
                name = entry.path.decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidPath("A name in this tree is not valid UTF-8.") from None
            check_entry_name(name)
        entries += 1
        longest = max(longest, len(entry.path))
        if entry.mode == MODE_TREE:
            below = _measure(store, entry.sha, depth + 1, max_entries, max_bytes, names)
            entries += below.entries
            nbytes += below.bytes
            deepest = max(deepest, below.depth + 1)
            longest = max(longest, len(entry.path) + 1 + below.path_bytes)
            largest = max(largest, below.largest)
            climb = max(climb, below.climb - 1)
        elif entry.mode != MODE_SUBMODULE:  # a gitlink names another repository's commit
            blob = _blob_size(store, entry.sha, entry.mode == MODE_LINK)
            nbytes += blob
            largest = max(largest, blob)
            if entry.mode == MODE_LINK:
                climb = max(climb, link_reach(store.get_raw(entry.sha)[1]))
        if entries > max_entries or nbytes > max_bytes:
            raise _too_large(entries, nbytes)
    size = Size(entries, nbytes, deepest, longest, largest, climb)
    with _LOCK:
        _MEMO[sha] = (size, names)
        if len(_MEMO) > _MEMO_MAX:
            _MEMO.popitem(last=False)
    return size


def _blob_size(store: Any, sha: bytes, link: bool) -> int:
    with _LOCK:
        known = _BLOBS.get(sha)
    if known is not None:
        return known
    kind, data = store.get_raw(sha)
    if kind != 3 and not link:  # 3: a blob
        raise InvalidPath("A file entry in this tree is not a blob.")
    size = len(data)
    with _LOCK:
        _BLOBS[sha] = size
        if len(_BLOBS) > _BLOBS_MAX:
            _BLOBS.popitem(last=False)
    return size
