"""What a run left in /workspace, read after exit: changed files and artifacts.

The stopped run's /workspace comes as one tar stream — its volume's folder walked on
its host without following any link (`walk_volume`, sent up by runs.workspace_up), or,
when the engine is not local, its `get_archive` stream — and is never extracted:
member names are checked by `workspaces.paths`, only regular files and folders become
artifacts (kept through Django's storage API, runs.artifacts, under names we make), and
links are data, never followed.

1. Every member is turned into a Git tree entry (files and symlinks as Git stores
   them; new paths the input commit's .gitignore ignores are left out, as git would).
2. That tree is diffed against the input commit with the workspace's own differ; on
   `commit_changes` it becomes a commit on branch `runs/<id>`.
3. Members under `[artifacts] paths` are kept (runs.artifacts), within the caps; links,
   devices, FIFOs and hard links are refused and named.
Granted secret values are masked in every path and diff text this returns.
"""

import functools
import hashlib
import io
import os
import stat
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from dulwich.ignore import IgnoreFilter
from dulwich.objects import Blob, Tree

from core.errors import BerthError, Invalid
from runs import artifacts
from runs.secrets import Masker
from sandbox.usage import walk
from workspaces.gitstore import (
    MODE_EXEC,
    MODE_FILE,
    MODE_LINK,
    MODE_SUBMODULE,
    MODE_TREE,
    GitStore,
    Node,
)
from workspaces.history import diff_trees
from workspaces.paths import clean_path, link_climbs_out
from workspaces.treesize import check_tree

MAX_SKIPPED_LISTED = 50
LINK_OUT_OF_TREE = (
    "a symlink whose target climbs out of /workspace: no sandbox could hold a commit "
    "with it; point it inside or at an absolute path"
)


def clean_artifact_paths(paths: list[str] | tuple[str, ...]) -> list[str]:
    """`[artifacts] paths` as clean relative paths ("dist/" means the folder dist)."""
    out = []
    for raw in paths:
        try:
            out.append(clean_path(raw.rstrip("/"), what="artifact path"))
        except Invalid as e:
            raise Invalid(
                f"workspace.toml [artifacts] paths: {e.message}",
                {"path": raw},
                code="invalid_workspace_toml",
            ) from None
    return out


class _Chunks(io.RawIOBase):
    """A file-like view of the engine's archive stream, for tarfile's stream mode."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.chunks, self.left = chunks, b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self.left:
            try:
                self.left = next(self.chunks)
            except StopIteration:
                return 0
        n = min(len(buffer), len(self.left))
        buffer[:n] = self.left[:n]
        self.left = self.left[n:]
        return n


@dataclass
class Outputs:
    changes: dict[str, Any]
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    refused: list[dict[str, str]] = field(default_factory=list)
    tree: bytes | None = None  # the tree of /workspace, when it differs from the input


class _Reader:
    def __init__(self, store: GitStore, run: Any, masker: Masker) -> None:
        self.store, self.run, self.masker = store, run, masker
        self.input_tree = store.commit(run.commit).tree
        self.old = self._flatten(self.input_tree, "")
        self.ignore = self._ignore_filter()
        self.root = Node(dirty=True)
        self.seen: dict[str, tuple[int, bytes]] = {}
        self.skipped: list[dict[str, str]] = []
        self.skipped_count = 0
        self.wanted = clean_artifact_paths(run.artifact_paths)
        self.found_wanted: set[str] = set()
        self.artifacts: list[dict[str, Any]] = []
        self.refused: list[dict[str, str]] = []
        self.artifact_bytes = 0
        # Past the tree caps (hard links to one big file, a million empty ones) the
        # volume is not turned into a tree at all: nothing to diff, nothing to commit.
        self.over_caps: str | None = None
        self.withheld: list[dict[str, Any]] = []

    def _flatten(self, tree_sha: bytes, prefix: str) -> dict[str, tuple[int, bytes]]:
        return flatten(self.store, tree_sha, prefix)

    def _ignore_filter(self) -> IgnoreFilter | None:
        return ignore_filter(self.store, self.old)

    def _ignored(self, path: str) -> bool:
        return is_ignored(self.ignore, self.old, path)

    def _skip(self, path: str, why: str) -> None:
        self.skipped_count += 1
        if len(self.skipped) < MAX_SKIPPED_LISTED:
            self.skipped.append({"path": self.masker.text(path), "why": why})

    def _refuse(self, path: str, why: str) -> None:
        self.refused.append({"path": self.masker.text(path), "why": why})

    def _put(self, path: str, entry: tuple[int, bytes]) -> None:
        if self.over_caps:
            return
        if len(self.seen) >= settings.WORKSPACE_MAX_TREE_ENTRIES:
            self.over_caps = f"more than {settings.WORKSPACE_MAX_TREE_ENTRIES:,} paths"
            self.root = Node(dirty=True)
            return
        node = self.root
        parts = path.encode().split(b"/")
        for part in parts[:-1]:
            child = node.entries.get(part)
            if not isinstance(child, Node):
                child = node.entries[part] = Node(dirty=True)
            node = child
        node.entries[parts[-1]] = entry
        self.seen[path] = entry

    def _wanted_by(self, path: str) -> str | None:
        for wanted in self.wanted:
            if path == wanted or path.startswith(wanted + "/"):
                return wanted
        return None

    def read(self, chunks: Iterator[bytes]) -> None:
        with tarfile.open(fileobj=io.BufferedReader(_Chunks(chunks), 1 << 16), mode="r|") as tar:
            for member in tar:
                self._member(member, functools.partial(tar.extractfile, member))

    def _member(self, member: tarfile.TarInfo, opener: Callable[[], Any]) -> None:
        name = member.name.split("/", 1)[1] if "/" in member.name else ""
        if not name:
            return  # the /workspace folder itself
        try:
            path = clean_path(name.rstrip("/"))
        except Invalid:
            self._skip(name, "not a path Git or Berth can hold (e.g. inside .git)")
            return
        wanted = self._wanted_by(path)
        if wanted:
            self.found_wanted.add(wanted)
        if member.isdir() or (self.over_caps and not wanted):
            return
        in_name = self.masker.scanner()
        in_name.feed(path.encode())
        if member.issym():
            in_name.feed(b"\0" + member.linkname.encode())
        if in_name.names():
            # A name (or a link's target) holding a value would put it in a tree object.
            if wanted:
                self._refuse(path, "its path contains a granted secret's value")
            self._withhold(path, in_name.names())
            return
        data, holds = None, list[str]()
        if member.isfile():
            if member.size > settings.WORKSPACE_MAX_FILE_BYTES and not wanted:
                self._skip(path, f"larger than {settings.WORKSPACE_MAX_FILE_BYTES >> 20} MB")
                if path in self.old:
                    self._put(path, self.old[path])  # shown as unchanged, not deleted
                return
            with opener() as source:
                if wanted:
                    data, holds = self._keep_artifact(path, member, source)
                elif member.size <= settings.WORKSPACE_MAX_FILE_BYTES:
                    data = source.read()
                    scanner = self.masker.scanner()
                    scanner.feed(data)
                    holds = scanner.names()
            if holds:
                self._withhold(path, holds)
            elif data is not None:
                self._record(path, MODE_EXEC if member.mode & 0o100 else MODE_FILE, data)
            else:
                self._skip(path, f"larger than {settings.WORKSPACE_MAX_FILE_BYTES >> 20} MB")
                if path in self.old:
                    self._put(path, self.old[path])  # too big to diff: shown as unchanged
            return
        if wanted:
            kind = (
                "a symlink"
                if member.issym()
                else "a hard link"
                if member.islnk()
                else "a FIFO"
                if member.isfifo()
                else "a device"
                if member.isdev()
                else "not a regular file"
            )
            self._refuse(path, f"{kind}: artifacts may only be regular files and folders")
        if member.issym() and link_climbs_out(path, member.linkname):
            # No sandbox could hold a commit with it (the engine refuses it).
            self._skip(path, LINK_OUT_OF_TREE)
            if path in self.old:
                self._put(path, self.old[path])
        elif member.issym():
            self._record(path, MODE_LINK, member.linkname.encode())
        elif member.islnk():
            target = member.linkname.split("/", 1)[1] if "/" in member.linkname else ""
            if target in self.seen and not self._ignored(path):
                self._put(path, self.seen[target])  # the same content as its target
        else:
            self._skip(path, "not a file, folder or symlink")

    def _record(self, path: str, mode: int, data: bytes) -> None:
        if self._ignored(path):
            return
        blob = Blob.from_string(data)
        if self.old.get(path) != (mode, blob.id) and blob.id not in self.store.repo.object_store:
            self.store.repo.object_store.add_object(blob)
        self._put(path, (mode, blob.id))

    def _keep_artifact(
        self, path: str, member: tarfile.TarInfo, source: Any
    ) -> tuple[bytes | None, list[str]]:
        """Keep one artifact file (runs.artifacts); return its bytes when they are small
        enough to also diff (else None), and the names of the granted secrets it holds.
        It is read through a scanner into an unnamed temporary file first: one holding a
        granted value is never kept (nor, as a blob, written to the store)."""
        small = member.size <= settings.WORKSPACE_MAX_FILE_BYTES
        why = None
        if len(self.artifacts) >= settings.RUN_ARTIFACTS_MAX_FILES:
            why = f"over the cap of {settings.RUN_ARTIFACTS_MAX_FILES} files"
        elif self.artifact_bytes + member.size > settings.RUN_ARTIFACTS_MAX_BYTES:
            why = (
                f"{member.size} bytes would pass the cap of "
                f"{settings.RUN_ARTIFACTS_MAX_BYTES >> 20} MB of artifacts per run "
                "(RUN_ARTIFACTS_MAX_MB)"
            )
        scanner, digest, kept = self.masker.scanner(), hashlib.sha256(), bytearray()
        with tempfile.TemporaryFile() as spool:
            while block := source.read(1 << 16):
                scanner.feed(block)
                if small:
                    kept += block
                if not why:
                    spool.write(block)
                    digest.update(block)
            holds = scanner.names()
            if holds:
                why = f"it contains the value of {', '.join(holds)}"
            if why:
                self._refuse(path, why)
                return (bytes(kept) if small else None), holds
            spool.seek(0)
            artifacts.keep(self.run.public_id, path, spool)
        self.artifact_bytes += member.size
        self.artifacts.append({"path": path, "size": member.size, "sha256": digest.hexdigest()})
        return (bytes(kept) if small else None), []

    def _withhold(self, path: str, names: list[str]) -> None:
        """A file holding a granted secret's value keeps its input version in the tree
        (or stays absent if new): its content is never stored, diffed or committed."""
        self.withheld.append({"path": self.masker.text(path), "secrets": names})
        if path in self.old:
            self._put(path, self.old[path])

    def finish(self) -> Outputs:
        for wanted in self.wanted:
            if wanted not in self.found_wanted:
                self._refuse(wanted, "no such file or folder after the run")
        for path, entry in self.old.items():
            if entry[0] == MODE_SUBMODULE:
                self._put(path, entry)  # never placed in /workspace, so not deleted
        tree = self.store.write_node(self.root)
        if not self.over_caps:
            try:
                check_tree(self.store.repo.object_store, tree)
            except BerthError as e:
                self.over_caps = e.message
        if self.over_caps:
            changes = {
                **empty_changes(),
                "skipped": self.skipped,
                "withheld": self.withheld,
                "skipped_count": self.skipped_count,
                "error": "The files the run left in /workspace are past what a "
                f"workspace may hold ({self.over_caps}); they are not kept "
                "as changes and cannot be committed.",
            }
            return Outputs(changes, self.artifacts, self.refused, None)
        changes = self._changes(tree)
        changes["withheld"] = self.withheld
        return Outputs(
            changes, self.artifacts, self.refused, tree if tree != self.input_tree else None
        )

    def _changes(self, tree: bytes) -> dict[str, Any]:
        out = describe_changes(self.store, self.input_tree, tree, self.masker)
        out.update(skipped=self.skipped, skipped_count=self.skipped_count)
        return out


def flatten(store: GitStore, tree_sha: bytes, prefix: str = "") -> dict[str, tuple[int, bytes]]:
    """Every file, link and submodule of a tree by path, as (mode, object id)."""
    out: dict[str, tuple[int, bytes]] = {}
    tree = store.repo[tree_sha]
    assert isinstance(tree, Tree)
    for entry in tree.iteritems():
        path = prefix + entry.path.decode("utf-8", "replace")
        if entry.mode == MODE_TREE:
            out.update(flatten(store, entry.sha, path + "/"))
        else:
            out[path] = (entry.mode, entry.sha)
    return out


def ignore_filter(store: GitStore, old: dict[str, tuple[int, bytes]]) -> IgnoreFilter | None:
    """The root .gitignore of the input tree (flattened), if it has one."""
    entry = old.get(".gitignore")
    if entry is None or entry[0] != MODE_FILE:
        return None
    lines = store.blob(entry[1]).splitlines()
    return IgnoreFilter([ln for ln in lines if ln.strip() and not ln.startswith(b"#")])


def is_ignored(ignore: IgnoreFilter | None, old: dict[str, Any], path: str) -> bool:
    """Whether a new path is one git would leave out (a folder path ends with /)."""
    if ignore is None or path.rstrip("/") in old:
        return False  # tracked files are never ignored (git's rule too)
    parts = path.rstrip("/").split("/")
    for i in range(1, len(parts)):
        if ignore.is_ignored("/".join(parts[:i]) + "/"):
            return True
    return bool(ignore.is_ignored(path))


def describe_changes(store: GitStore, old: bytes, new: bytes, masker: Masker) -> dict[str, Any]:
    """A tree's changes against another, as a run's `changes` say them: the paths by
    status and one unified diff, within RUN_CHANGES_MAX_PATHS and _DIFF_BYTES, with
    granted values masked."""
    diff = (
        diff_trees(store, old, new)
        if new != old
        else {"files": [], "stats": {"files": 0, "additions": 0, "deletions": 0}}
    )
    limit_paths, limit_bytes = (settings.RUN_CHANGES_MAX_PATHS, settings.RUN_CHANGES_MAX_DIFF_BYTES)
    out = {**empty_changes(), "stats": diff["stats"]}
    text: list[str] = []
    size = 0
    for i, item in enumerate(diff["files"]):
        if i >= limit_paths:
            out["truncated"] = True
            break
        path = masker.text(item["path"])
        status = item["status"]
        if status == "renamed":
            out["renamed"].append({"from": masker.text(item["old_path"]), "to": path})
        elif status in ("added", "modified", "deleted"):
            out[status].append(path)
        else:
            out["added"].append(path)
        if item["binary"] or item["too_large"]:
            out["binary"].append(path)
            continue
        patch = masker.text(item["patch"])
        if size + len(patch) > limit_bytes:
            out["truncated"] = True
            continue
        text.append(patch)
        size += len(patch)
    out["diff"] = "".join(text)
    return out


def read_outputs(
    store: GitStore,
    run: Any,
    masker: Masker,
    *,
    chunks: Iterator[bytes],
) -> Outputs:
    """Read a stopped run's /workspace, a tar stream (runs.outputs_up: as its host sent
    it), into changes and artifacts."""
    artifacts.remove_all(run.public_id)  # a finalize that is run again starts over
    reader = _Reader(store, run, masker)
    reader.read(chunks)
    return reader.finish()


def walk_volume(root: str) -> Iterator[tuple[tarfile.TarInfo, Callable[[], Any]]]:
    """The entries of a stopped run's volume, as tar members in `workspace/…`, read on
    the host without ever following a link.

    `sandbox.usage.walk` opens every folder with O_NOFOLLOW | O_DIRECTORY relative
    to its parent's fd, holding one fd per level of the current path (100,000 sibling
    folders never mean 100,000 open fds in the agent); every file is opened with
    O_NOFOLLOW | O_NONBLOCK (a FIFO never blocks us), then fstat'ed: a name swapped for
    a link cannot lead outside. Nothing runs in the sandbox any more (its container has
    exited), so nothing changes the tree while we read it.
    """
    seen: dict[tuple[int, int], str] = {}
    for entry in walk(root, sort=True):
        st, name = entry.stat, f"workspace/{entry.path}"
        info = tarfile.TarInfo(name)
        info.mode = st.st_mode & 0o7777
        if stat.S_ISDIR(st.st_mode):
            info.type = tarfile.DIRTYPE
            yield info, lambda: None
        elif stat.S_ISLNK(st.st_mode):
            info.type = tarfile.SYMTYPE
            info.linkname = os.readlink(entry.name, dir_fd=entry.dir_fd)
            yield info, lambda: None
        elif stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) in seen:
            info.type, info.linkname = tarfile.LNKTYPE, seen[(st.st_dev, st.st_ino)]
            yield info, lambda: None
        elif stat.S_ISREG(st.st_mode):
            if st.st_nlink > 1:
                seen[(st.st_dev, st.st_ino)] = name
            info.type, info.size = tarfile.REGTYPE, st.st_size
            yield info, functools.partial(_open_regular, entry.name, entry.dir_fd)
        else:
            info.type = tarfile.FIFOTYPE if stat.S_ISFIFO(st.st_mode) else tarfile.CHRTYPE
            yield info, lambda: None


def _open_regular(name: str, dir_fd: int) -> Any:
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{name} is no longer a regular file")
    return os.fdopen(fd, "rb")


def empty_changes() -> dict[str, Any]:
    return {
        "added": [],
        "modified": [],
        "deleted": [],
        "renamed": [],
        "binary": [],
        "stats": {"files": 0, "additions": 0, "deletions": 0},
        "diff": "",
        "truncated": False,
        "skipped": [],
        "skipped_count": 0,
        "withheld": [],
    }
