"""Reading a workspace: trees, files, history, commits, diffs and compares."""

import base64
import difflib
from typing import Any

from django.conf import settings
from dulwich.diff_tree import RenameDetector, tree_changes

from core.errors import Invalid, NotFound
from workspaces import contract
from workspaces.gitstore import MODE_LINK, MODE_SUBMODULE, MODE_TREE, GitStore, is_text
from workspaces.treesize import FileTooLarge

MAX_DIFF_BYTES = 512 * 1024  # per file: past this a diff says "too large" instead
# All patches of one diff together: past this, further files are listed without one
# (`too_large`), so a diff of a hundred thousand changed files stays a bounded answer.
MAX_DIFF_TOTAL_BYTES = 8 * 1024 * 1024


def commit_summary(store: GitStore, sha: str) -> dict[str, Any]:
    c = store.commit(sha)
    name, _, email = c.author.decode("utf-8", "replace").partition(" <")
    return {
        "sha": sha,
        "message": c.message.decode("utf-8", "replace").rstrip("\n"),
        "title": c.message.decode("utf-8", "replace").split("\n", 1)[0],
        "author": {"name": name, "email": email.rstrip(">")},
        "authored_at": c.author_time,
        "parents": [p.decode() for p in c.parents],
    }


def read_file(store: GitStore, commit: str, path: str) -> dict[str, Any]:
    """One entry at a commit. Symlinks come back as their target, as metadata only:
    the host never follows them."""
    mode, sha = store.lookup(commit, path)
    info: dict[str, Any] = {
        "path": path,
        "commit": commit,
        "sha": sha.decode(),
        "mode": f"{mode:06o}",
    }
    if mode == MODE_TREE:
        raise Invalid(
            f"{path!r} is a folder; list it with the tree endpoint.",
            {"path": path},
            code="is_a_directory",
        )
    if mode == MODE_SUBMODULE:
        return {**info, "type": "submodule", "size": None, "content": None, "encoding": None}
    data = store.blob(sha)
    if mode == MODE_LINK:
        return {
            **info,
            "type": "symlink",
            "size": len(data),
            "content": None,
            "encoding": None,
            "target": data.decode("utf-8", "replace"),
        }
    if len(data) > settings.WORKSPACE_MAX_FILE_BYTES:
        raise FileTooLarge(f"{path!r} is larger than the read limit.", {"path": path})
    text = is_text(data)
    return {
        **info,
        "type": "file",
        "size": len(data),
        "raw": data,
        "encoding": "utf-8" if text else "base64",
        "content": data.decode("utf-8") if text else base64.b64encode(data).decode(),
    }


def history(store: GitStore, commit: str, path: str, page: int, per_page: int) -> dict:
    """Commits reachable from `commit` (touching `path` if given), newest first."""
    if page < 1 or not 1 <= per_page <= 100:
        raise Invalid("page starts at 1; per_page is 1 to 100.", {"field": "page"})
    kwargs: dict[str, Any] = {"include": [commit.encode()]}
    if path:
        kwargs["paths"] = [path.encode()]
    walker = store.repo.get_walker(**kwargs)
    skip, more = (page - 1) * per_page, False
    out: list[dict[str, Any]] = []
    for i, entry in enumerate(walker):
        if i < skip:
            continue
        if len(out) == per_page:
            more = True
            break
        out.append(commit_summary(store, entry.commit.id.decode()))
    return {"commits": out, "page": page, "per_page": per_page, "has_more": more}


def diff_trees(store: GitStore, old_tree: bytes | None, new_tree: bytes) -> dict[str, Any]:
    """Per-file unified diffs with stats between two trees (renames detected)."""
    files, additions, deletions, patched = [], 0, 0, 0
    changes = tree_changes(
        store.repo.object_store,
        old_tree,
        new_tree,
        rename_detector=RenameDetector(store.repo.object_store),
    )
    for change in changes:
        old_entry = change.old if change.old and change.old.path else None
        new_entry = change.new if change.new and change.new.path else None
        old_path = old_entry.path.decode("utf-8", "replace") if old_entry else None
        new_path = new_entry.path.decode("utf-8", "replace") if new_entry else None
        item: dict[str, Any] = {
            "status": {
                "add": "added",
                "delete": "deleted",
                "modify": "modified",
                "rename": "renamed",
                "copy": "copied",
            }.get(change.type, change.type),
            "path": new_path or old_path,
            "old_path": old_path,
            "additions": 0,
            "deletions": 0,
            "binary": False,
            "too_large": False,
            "patch": "",
        }
        if MODE_SUBMODULE in (getattr(old_entry, "mode", None), getattr(new_entry, "mode", None)):
            _submodule_item(item, old_entry, new_entry)
            additions += item["additions"]
            deletions += item["deletions"]
            files.append(item)
            continue
        if patched >= MAX_DIFF_TOTAL_BYTES:
            item["too_large"] = True
            files.append(item)
            continue
        old = store.blob(old_entry.sha) if old_entry else b""
        new = store.blob(new_entry.sha) if new_entry else b""
        patched += len(old) + len(new)
        if len(old) > MAX_DIFF_BYTES or len(new) > MAX_DIFF_BYTES:
            item["too_large"] = True
        elif (old_text := _diff_text(old)) is None or (new_text := _diff_text(new)) is None:
            item["binary"] = True
        else:
            lines = list(
                difflib.unified_diff(
                    old_text.splitlines(keepends=True),
                    new_text.splitlines(keepends=True),
                    f"a/{old_path}" if old_path else "/dev/null",
                    f"b/{new_path}" if new_path else "/dev/null",
                    n=3,
                )
            )
            item["patch"] = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
            item["additions"] = sum(1 for ln in lines[2:] if ln.startswith("+"))
            item["deletions"] = sum(1 for ln in lines[2:] if ln.startswith("-"))
        additions += item["additions"]
        deletions += item["deletions"]
        files.append(item)
    return {
        "files": files,
        "stats": {"files": len(files), "additions": additions, "deletions": deletions},
    }


def _diff_text(data: bytes) -> str | None:
    """A blob as text for a diff, or None when it is binary. Git's rule decides (a NUL
    near the start): a Latin-1 or other 8-bit file is text a reviewer must be able to
    read, shown byte for byte as Latin-1 when it is not UTF-8."""
    if b"\0" in data[:8000]:
        return None
    return data.decode("utf-8") if is_text(data) else data.decode("latin-1")


def _submodule_item(item: dict[str, Any], old_entry: Any, new_entry: Any) -> None:
    """A gitlink names a commit of another repository, which this store does not hold:
    shown the way git shows it (`Subproject commit <sha>`), never read as a blob. A
    path that turned from a file into a submodule (or back) shows both sides."""
    item["submodule"] = True
    lines = []
    for sign, entry in (("-", old_entry), ("+", new_entry)):
        if entry is None:
            continue
        if entry.mode == MODE_SUBMODULE:
            lines.append(f"{sign}Subproject commit {entry.sha.decode()}\n")
        else:
            lines.append(
                f"{sign}(a {'symlink' if entry.mode == MODE_LINK else 'file'}, "
                f"blob {entry.sha.decode()[:12]})\n"
            )
    header = [
        f"--- a/{item['old_path']}\n" if item["old_path"] else "--- /dev/null\n",
        f"+++ b/{item['path']}\n" if new_entry else "+++ /dev/null\n",
        f"@@ -{1 if old_entry else 0} +{1 if new_entry else 0} @@\n",
    ]
    item["patch"] = "".join(header + lines)
    item["additions"] = sum(1 for ln in lines if ln.startswith("+"))
    item["deletions"] = sum(1 for ln in lines if ln.startswith("-"))


def commit_detail(store: GitStore, sha: str) -> dict[str, Any]:
    commit = store.commit(sha)
    parent_tree = store.commit(commit.parents[0].decode()).tree if commit.parents else None
    return {
        **commit_summary(store, sha),
        "diff": diff_trees(store, parent_tree, commit.tree),
        "contract_changes": [c.as_dict() for c in contract.commit_changes(store, sha)],
    }


def compare(store: GitStore, base: str, head: str) -> dict[str, Any]:
    """What `head` has that `base` does not: its commits, and the diff of the trees."""
    walker = store.repo.get_walker(
        include=[head.encode()], exclude=[base.encode()], max_entries=250
    )
    commits = [commit_summary(store, e.commit.id.decode()) for e in walker]
    return {
        "base": base,
        "head": head,
        "commits": commits,
        "diff": diff_trees(store, store.commit(base).tree, store.commit(head).tree),
    }


def require_commit(store: GitStore, sha: str) -> str:
    try:
        return store.resolve(sha)
    except NotFound:
        raise NotFound(f"No commit {sha!r}.", {"sha": sha}, code="ref_not_found") from None


def last_change(store: GitStore, base: str, head: str, path: str) -> dict[str, Any] | None:
    """The newest commit after `base` up to `head` that touched `path`."""
    walker = store.repo.get_walker(
        include=[head.encode()], exclude=[base.encode()], paths=[path.encode()], max_entries=1
    )
    for entry in walker:
        return commit_summary(store, entry.commit.id.decode())
    return None


def renames(store: GitStore, base: str, head: str, paths: list[str]) -> dict[str, str]:
    """Where each of `paths` went between two commits, when a rename says so."""
    wanted = {p.encode() for p in paths}
    out: dict[str, str] = {}
    changes = tree_changes(
        store.repo.object_store,
        store.commit(base).tree,
        store.commit(head).tree,
        rename_detector=RenameDetector(store.repo.object_store),
    )
    for change in changes:
        old, new = change.old, change.new
        if change.type == "rename" and old and new and old.path in wanted:
            out[old.path.decode()] = new.path.decode("utf-8", "replace")
    return out
