"""A commit's tree as a tar stream, built straight from Git objects: no host checkout.

Only what Git stores goes in — regular files (0644 or 0755), folders and symlinks (as
links; nothing on the host is ever followed). Submodules are skipped. Entries belong to
the sandbox user so the command can change them.
"""

import io
import tarfile

from dulwich.objects import Tree

from workspaces.gitstore import MODE_EXEC, MODE_LINK, MODE_SUBMODULE, MODE_TREE, GitStore

SANDBOX_UID = 1000


def tree_tarball(store: GitStore, commit_sha: str, under: str = "") -> bytes:
    """The commit's tree as a tar stream; `under` puts it in a folder of that name (made
    with the sandbox user as owner), for a place that does not exist yet."""
    commit = store.commit(commit_sha)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        if under:
            tar.addfile(_info(under, tarfile.DIRTYPE, 0o755, commit.commit_time))
        _add_tree(tar, store, commit.tree, f"{under}/" if under else "", commit.commit_time)
    return buffer.getvalue()


def _info(name: str, kind: bytes, mode: int, mtime: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime = kind, mode, mtime
    info.uid = info.gid = SANDBOX_UID
    info.uname = info.gname = "sandbox"
    return info


def _add_tree(tar: tarfile.TarFile, store: GitStore, tree_sha: bytes, prefix: str,
              mtime: int) -> None:
    tree = store.repo[tree_sha]
    assert isinstance(tree, Tree)
    for entry in tree.iteritems():
        name = prefix + entry.path.decode("utf-8")
        if entry.mode == MODE_TREE:
            tar.addfile(_info(name, tarfile.DIRTYPE, 0o755, mtime))
            _add_tree(tar, store, entry.sha, name + "/", mtime)
        elif entry.mode == MODE_SUBMODULE:
            continue
        elif entry.mode == MODE_LINK:
            info = _info(name, tarfile.SYMTYPE, 0o777, mtime)
            info.linkname = store.blob(entry.sha).decode("utf-8", "replace")
            tar.addfile(info)
        else:
            data = store.blob(entry.sha)
            info = _info(name, tarfile.REGTYPE, 0o755 if entry.mode == MODE_EXEC else 0o644,
                         mtime)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
