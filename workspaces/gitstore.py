"""Bare Git repositories, driven with dulwich.

The host never checks out a work tree, never runs hooks, filters or fsmonitor, and
never follows a symlink stored in a tree: trees are read and written as objects only.
"""

import fcntl
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from dulwich.objects import Blob, Commit, Tree
from dulwich.repo import Repo

from core.errors import Conflict, Invalid, NotFound
from workspaces.modes import MODE_EXEC as MODE_EXEC
from workspaces.modes import MODE_FILE as MODE_FILE
from workspaces.modes import MODE_LINK, MODE_SUBMODULE, MODE_TREE
from workspaces.treesize import check_tree

ZERO_SHA = b"0" * 40


@dataclass
class _Reach:
    """Commits a walk from one set of tips has passed, and whether it went to the end."""

    seen: set[bytes] = field(default_factory=set)
    complete: bool = False


# Per (repository, tips): bounded, oldest dropped; shared by request threads.
_REACHED: OrderedDict[tuple[str, frozenset[str]], _Reach] = OrderedDict()
_REACHED_MAX = 16  # a walk of 100,000 commits keeps ~8 MB of ids
_REACH_LOCK = threading.Lock()


def entry_type(mode: int) -> str:
    if mode == MODE_TREE:
        return "dir"
    if mode == MODE_LINK:
        return "symlink"
    if mode == MODE_SUBMODULE:
        return "submodule"
    return "file"


def is_text(data: bytes) -> bool:
    """Git's rule of thumb (no NUL near the start), plus: it must decode as UTF-8."""
    if b"\0" in data[:8000]:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


_BAD_REF = re.compile(
    r"(^[-/.])|(\.\.)|([\x00-\x20~^:?*\[\\\x7f])|(@\{)|(//)|([/.]$)|(\.lock$)"
    r"|(/\.)|(\.lock/)"
)


def check_branch_name(name: str) -> str:
    """git check-ref-format's rules for a branch name, condensed."""
    if not name or len(name) > 200 or name == "@" or name == "HEAD" or _BAD_REF.search(name):
        raise Invalid(
            f"{name!r} is not a valid branch name.", {"field": "branch"}, code="invalid_branch"
        )
    return name


@dataclass
class Author:
    name: str
    email: str

    def identity(self) -> bytes:
        clean = re.sub(r"[<>\n]", "", self.name).strip() or "unknown"
        return f"{clean} <{re.sub(r'[<> \n]', '', self.email)}>".encode()


@dataclass
class Node:
    """A folder being edited: entries are (mode, sha) of untouched objects, or Nodes
    for folders opened for editing. `sha` is the tree it was loaded from."""

    sha: bytes | None = None
    entries: dict[bytes, "tuple[int, bytes] | Node"] = field(default_factory=dict)
    dirty: bool = False


class GitStore:
    """One workspace's bare repository."""

    def __init__(self, path: Path, pinned: Callable[[str], bool] | None = None) -> None:
        self.path = path
        # Whether a Berth record pinned a commit (workspaces.models.PinnedCommit): such a
        # commit stays usable after a force-push or a branch deletion.
        self.pinned = pinned
        self.repo = Repo(str(path), bare=True)
        # Belt and braces: nothing can write a hook here, but never run one anyway.
        self.repo.hooks.clear()

    @classmethod
    def init(cls, path: Path, default_branch: str) -> "GitStore":
        path.parent.mkdir(parents=True, exist_ok=True)
        Repo.init_bare(str(path), mkdir=True).close()
        store = cls(path)
        store.repo.refs.set_symbolic_ref(b"HEAD", b"refs/heads/" + default_branch.encode())
        return store

    def close(self) -> None:
        self.repo.close()

    @contextmanager
    def write_lock(self) -> Iterator[None]:
        """Serialise writers of this repository across processes (daphne, workers)."""
        with open(self.path / "berth.lock", "w") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    # -- refs -----------------------------------------------------------------------

    def branch_head(self, branch: str) -> str | None:
        sha = self.repo.refs.as_dict().get(b"refs/heads/" + branch.encode())
        return sha.decode() if sha else None

    def branches(self) -> dict[str, str]:
        return {k.decode(): v.decode() for k, v in self.repo.refs.as_dict(b"refs/heads").items()}

    def tags(self) -> dict[str, str]:
        return {k.decode(): v.decode() for k, v in self.repo.refs.as_dict(b"refs/tags").items()}

    def resolve(self, ref: str) -> str:
        """The commit SHA a branch, tag or (full or abbreviated, ≥ 7) SHA names."""
        raw = ref.encode()
        for prefix in (b"refs/heads/", b"refs/tags/"):
            sha = self.repo.refs.as_dict().get(prefix + raw)
            if sha:
                return self._peel(sha)
        if re.fullmatch(r"[0-9a-f]{7,40}", ref):
            if len(ref) == 40:
                matches = [raw] if raw in self.repo.object_store else []
            else:
                matches = list(self.repo.object_store.iter_prefix(raw))
            commits = [m for m in matches if self.repo[m].type_name in (b"commit", b"tag")]
            # Only what a branch or tag reaches, or a Berth record pinned: the store also
            # holds the objects of refused pushes, which no door may hand out.
            tips = self._tips() if commits else frozenset()
            usable = {self._peel(m) for m in commits if self.usable(self._peel(m), tips)}
            if len(usable) == 1:
                return usable.pop()
            if len(usable) > 1:
                raise Invalid(
                    f"{ref!r} is ambiguous; give more characters.",
                    {"ref": ref},
                    code="ambiguous_ref",
                )
        raise NotFound(f"No branch, tag or commit {ref!r}.", {"ref": ref}, code="ref_not_found")

    def usable(self, sha: str, tips: frozenset[str] | None = None) -> bool:
        """A commit reachable from a branch or a tag, or pinned by a Berth record.

        A walk from the tips, newest first, stops at the commit, and what it passed is
        kept per set of tips (`_Reach`): a recent commit costs a few reads, an old one
        is found again at once, and an unreachable one costs one whole walk per change
        of the branches, however often it is asked for."""
        tips = self._tips() if tips is None else tips
        if sha in tips or (self.pinned is not None and self.pinned(sha)):
            return True
        key = (str(self.path), tips)
        with _REACH_LOCK:
            reach = _REACHED.get(key)
            if reach is None:
                reach = _REACHED[key] = _Reach()
                if len(_REACHED) > _REACHED_MAX:
                    _REACHED.popitem(last=False)
        wanted = sha.encode()
        if wanted in reach.seen:
            return True
        if reach.complete:
            return False
        heads = [t.encode() for t in tips]
        for entry in self.repo.get_walker(include=heads):
            reach.seen.add(entry.commit.id)
            if entry.commit.id == wanted:
                return True
        reach.complete = True
        return False

    def is_base(self, sha: str) -> bool:
        """Whether a write may start from this commit (workspaces.merge): one a branch
        or a tag reaches, or Berth pinned; never the objects of a refused push."""
        raw = sha.encode()
        if not re.fullmatch(r"[0-9a-f]{40}", sha) or raw not in self.repo.object_store:
            return False
        if self.repo[raw].type_name != b"commit":
            return False
        return self.usable(sha)

    def _tips(self) -> frozenset[str]:
        tips = set()
        for name, value in self.repo.refs.as_dict().items():
            if name.startswith((b"refs/heads/", b"refs/tags/")) and value in self.repo:
                try:
                    tips.add(self._peel(value))
                except NotFound:  # a tag of a tree or a blob names no commit
                    continue
        return frozenset(tips)

    def _peel(self, sha: bytes) -> str:
        obj = self.repo[sha]
        while obj.type_name == b"tag":
            obj = self.repo[obj.object[1]]
        if obj.type_name != b"commit":
            raise NotFound("That ref does not name a commit.", code="ref_not_found")
        return obj.id.decode()

    def create_branch(self, name: str, sha: str) -> None:
        check_branch_name(name)
        if not self.repo.refs.add_if_new(b"refs/heads/" + name.encode(), sha.encode()):
            raise Conflict(f"The branch {name!r} already exists.", {"branch": name})

    def delete_branch(self, name: str) -> None:
        ref = b"refs/heads/" + name.encode()
        if ref not in self.repo.refs.as_dict():
            raise NotFound(f"No branch {name!r}.", {"branch": name}, code="branch_not_found")
        self.repo.refs.remove_if_equals(ref, None)

    # -- reading --------------------------------------------------------------------

    def commit(self, sha: str) -> Commit:
        obj = self.repo[sha.encode()]
        assert isinstance(obj, Commit)
        return obj

    def lookup(self, commit_sha: str, path: str) -> tuple[int, bytes]:
        """(mode, sha) of the entry at `path` in a commit's tree; "" is the root tree."""
        mode, sha = MODE_TREE, self.commit(commit_sha).tree
        if not path:
            return mode, sha
        for part in path.encode().split(b"/"):
            if mode != MODE_TREE:
                raise NotFound(f"No file {path!r} at this commit.", {"path": path})
            tree = self.repo[sha]
            assert isinstance(tree, Tree)
            if part not in tree:
                raise NotFound(f"No file {path!r} at this commit.", {"path": path})
            mode, sha = tree[part]
        return mode, sha

    def list_dir(self, commit_sha: str, path: str) -> list[dict]:
        mode, sha = self.lookup(commit_sha, path)
        if mode != MODE_TREE:
            raise Invalid(
                f"{path!r} is a file, not a folder.", {"path": path}, code="not_a_directory"
            )
        tree = self.repo[sha]
        assert isinstance(tree, Tree)
        out = []
        for entry in tree.iteritems():
            name = entry.path.decode("utf-8", "replace")
            kind = entry_type(entry.mode)
            item: dict = {
                "name": name,
                "path": f"{path}/{name}" if path else name,
                "type": kind,
                "mode": f"{entry.mode:06o}",
                "sha": entry.sha.decode(),
                "size": None,
            }
            if kind in ("file", "symlink"):
                item["size"] = self.repo.object_store.get_raw(entry.sha)[1].__len__()
            out.append(item)
        out.sort(key=lambda e: (e["type"] != "dir", e["name"].lower()))
        return out

    def walk(self, commit_sha: str) -> Iterator[tuple[str, int, bytes]]:
        """(path, mode, sha) of every entry but folders in a commit's tree, depth first
        in tree order, as objects: a link is an entry (its content is its target, never
        followed), a submodule a commit id. Callers bound the tree first (treesize)."""
        stack: list[tuple[str, bytes]] = [("", self.commit(commit_sha).tree)]
        while stack:
            prefix, sha = stack.pop()
            tree = self.repo[sha]
            assert isinstance(tree, Tree)
            below = []
            for entry in tree.iteritems():
                path = prefix + entry.path.decode("utf-8", "replace")
                if entry.mode == MODE_TREE:
                    below.append((path + "/", entry.sha))
                else:
                    yield path, entry.mode, entry.sha
            stack.extend(reversed(below))

    def blob(self, sha: bytes) -> bytes:
        return self.repo.object_store.get_raw(sha)[1]

    # -- writing --------------------------------------------------------------------

    def load_node(self, tree_sha: bytes | None) -> Node:
        node = Node(sha=tree_sha)
        if tree_sha:
            tree = self.repo[tree_sha]
            assert isinstance(tree, Tree)
            node.entries = {e.path: (e.mode, e.sha) for e in tree.iteritems()}
        return node

    def write_node(self, node: Node) -> bytes:
        """Store a folder's edited tree bottom-up; unchanged subtrees keep their SHA."""
        tree = Tree()
        for name, value in node.entries.items():
            if isinstance(value, Node):
                if not value.entries:
                    continue  # Git stores no empty folders
                sha = value.sha if not value.dirty and value.sha else self.write_node(value)
                tree.add(name, MODE_TREE, sha)
            else:
                tree.add(name, value[0], value[1])
        self.repo.object_store.add_object(tree)
        return tree.id

    def add_blob(self, data: bytes) -> bytes:
        blob = Blob.from_string(data)
        self.repo.object_store.add_object(blob)
        return blob.id

    def make_commit(self, tree: bytes, parents: list[str], author: Author, message: str) -> str:
        """Every commit Berth itself makes: its tree is measured against the caps first
        (TreeTooLarge, FileTooLarge), whatever door or process asked for it."""
        check_tree(self.repo.object_store, tree)
        commit = Commit()
        commit.tree = tree
        commit.parents = [p.encode() for p in parents]  # type: ignore[misc]
        commit.author = author.identity()
        commit.committer = b"Berth <berth@localhost>"
        commit.author_time = commit.commit_time = int(time.time())
        commit.author_timezone = commit.commit_timezone = 0
        commit.encoding = b"UTF-8"
        commit.message = (message.strip() or "Update files").encode() + b"\n"
        self.repo.object_store.add_object(commit)
        return commit.id.decode()

    def advance(self, branch: str, old: str | None, new: str) -> None:
        """Move a branch from `old` to `new`, only if nobody moved it meanwhile."""
        ref = b"refs/heads/" + branch.encode()
        ok = (
            self.repo.refs.set_if_equals(ref, old.encode(), new.encode())
            if old
            else self.repo.refs.add_if_new(ref, new.encode())
        )
        if not ok:
            head = self.branch_head(branch)
            raise Conflict(
                f"The branch {branch!r} moved while this commit was being made; "
                "fetch the new head and try again.",
                {"head": head},
            )
