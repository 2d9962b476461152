"""A commit's tree as a tar stream, built straight from Git objects: no host checkout.

Only what Git stores goes in — regular files (0644 or 0755), folders and symlinks (as
links; nothing on the host is ever followed). Submodules are skipped, and so is a
symlink whose relative target climbs out of the tree (an older commit's: the doors
refuse new ones): the engine refuses the whole archive for one, so none of the commit's
runs could start (`links_out`: what the run's log names). Entries belong to the sandbox
user so the command can change them.

The tree is measured first (workspaces.treesize: refused past the caps, whatever an
older commit holds), then streamed: a chunk per entry, so what is held at once is one
file, never the whole tree.
"""

import io
import tarfile
from collections.abc import Iterator
from typing import Any

from dulwich.objects import Tree

from workspaces.gitstore import MODE_EXEC, MODE_LINK, MODE_SUBMODULE, MODE_TREE, GitStore
from workspaces.paths import link_climbs_out
from workspaces.treesize import Size, check_tree, links_out_of_tree

SANDBOX_UID = 1000
# A tree whose files add up to less than this is built in one piece (one engine write,
# which the run's hot path prefers); past it, streamed.
SMALL_TREE_BYTES = 8 * 1024 * 1024
CHUNK_BYTES = 256 * 1024


class _Spout(io.RawIOBase):
    """What tarfile writes into: handed on chunk by chunk by `tree_tar_stream`."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.offset = self.pending = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self.chunks.append(bytes(data))
        self.offset += len(data)
        self.pending += len(data)
        return len(data)

    def tell(self) -> int:
        return self.offset

    def take(self) -> bytes:
        out, self.chunks, self.pending = b"".join(self.chunks), [], 0
        return out

    def full(self) -> bool:
        return self.pending >= CHUNK_BYTES


def measure_commit(store: GitStore, commit_sha: str) -> Size:
    """The commit's tree against the caps (TreeTooLarge, FileTooLarge; InvalidPath for
    a path too long or deep to copy). Names are not checked again: a name accepted
    before a rule existed must not stop the runs of an older commit."""
    return check_tree(store.repo.object_store, store.commit(commit_sha).tree, names=False)


def links_out(store: GitStore, commit_sha: str) -> list[str]:
    """The paths of the commit's symlinks that climb out of the tree, which hydration
    leaves out (measured first: only folders holding one are looked into)."""
    tree = store.commit(commit_sha).tree
    return [path for path, _ in links_out_of_tree(store.repo.object_store, tree)]


def tree_tar_stream(store: GitStore, commit_sha: str, under: str = "") -> Iterator[bytes]:
    """The commit's tree as tar chunks; `under` puts it in a folder of that name (made
    with the sandbox user as owner), for a place that does not exist yet. Measure the
    commit first (`measure_commit`): this expands whatever the tree names."""
    commit = store.commit(commit_sha)
    spout = _Spout()
    with tarfile.open(fileobj=spout, mode="w", format=tarfile.PAX_FORMAT) as tar:
        if under:
            tar.addfile(_info(under, tarfile.DIRTYPE, 0o755, commit.commit_time))
        yield from _add_tree(
            tar, spout, store, commit.tree, f"{under}/" if under else "", commit.commit_time, under
        )
    yield spout.take()


def tree_tarball(store: GitStore, commit_sha: str, under: str = "") -> bytes:
    """The same stream in one piece, for a tree measured to be small."""
    return b"".join(tree_tar_stream(store, commit_sha, under))


def _info(name: str, kind: bytes, mode: int, mtime: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime = kind, mode, mtime
    info.uid = info.gid = SANDBOX_UID
    info.uname = info.gname = "sandbox"
    return info


def _add_tree(
    tar: tarfile.TarFile,
    spout: _Spout,
    store: GitStore,
    tree_sha: bytes,
    prefix: str,
    mtime: int,
    under: str = "",
) -> Iterator[bytes]:
    tree = store.repo[tree_sha]
    assert isinstance(tree, Tree)
    for entry in tree.iteritems():
        name = prefix + entry.path.decode("utf-8")
        if entry.mode == MODE_TREE:
            tar.addfile(_info(name, tarfile.DIRTYPE, 0o755, mtime))
            yield from _add_tree(tar, spout, store, entry.sha, name + "/", mtime, under)
        else:
            _add_leaf(tar, store, name, entry.mode, entry.sha, mtime, under)
        if spout.full():
            yield spout.take()


def _add_leaf(
    tar: tarfile.TarFile,
    store: GitStore,
    name: str,
    mode: int,
    sha: bytes,
    mtime: int,
    under: str = "",
) -> None:
    """A file or a link (a submodule is skipped, as is a link out of the tree: judged
    from the repository's root, whatever folder the tree goes under)."""
    if mode == MODE_SUBMODULE:
        return
    if mode == MODE_LINK:
        target = store.blob(sha)
        if link_climbs_out(name.removeprefix(f"{under}/") if under else name, target):
            return
        info = _info(name, tarfile.SYMTYPE, 0o777, mtime)
        info.linkname = target.decode("utf-8", "replace")
        tar.addfile(info)
        return
    data = store.blob(sha)
    info = _info(name, tarfile.REGTYPE, 0o755 if mode == MODE_EXEC else 0o644, mtime)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def entries_tar_stream(
    store: GitStore, entries: list[tuple[str, int, bytes]], mtime: int
) -> Iterator[bytes]:
    """Only the given entries of a tree — (path, mode, sha), a folder with all it holds —
    under their parent folders, every time stamp `mtime`: for a step that must see
    nothing but what it was keyed by. The entries come from a measured commit."""
    spout = _Spout()
    made: set[str] = set()  # folders in the tar
    given: set[str] = set()  # entries in it with all they hold
    with tarfile.open(fileobj=spout, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, mode, sha in entries:
            parts = path.split("/")
            if any("/".join(parts[:i]) in given for i in range(1, len(parts) + 1)):
                continue  # inside a folder already given whole (or given twice)
            given.add(path)
            for i in range(1, len(parts)):
                parent = "/".join(parts[:i])
                if parent not in made:
                    tar.addfile(_info(parent, tarfile.DIRTYPE, 0o755, mtime))
                    made.add(parent)
            if mode == MODE_TREE:
                if path not in made:
                    tar.addfile(_info(path, tarfile.DIRTYPE, 0o755, mtime))
                    made.add(path)
                yield from _add_tree(tar, spout, store, sha, path + "/", mtime)
            else:
                _add_leaf(tar, store, path, mode, sha, mtime)
            if spout.full():
                yield spout.take()
    yield spout.take()
