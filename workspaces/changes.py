"""Applying a list of file changes (write, delete, rename) to a tree, in memory.

A delete or a rename moves whatever the path names, a file or a whole folder (one tree
entry either way); a door that means one of them says so with `kind`, and the other is
refused rather than moved or deleted by surprise.

Only the folders on the changed paths are loaded and rewritten, so a one-file commit
costs the same in a 10-file and a 10,000-file repository.
"""

from dataclasses import dataclass

from core.errors import Conflict, Invalid, NotFound
from workspaces.gitstore import MODE_EXEC, MODE_FILE, MODE_LINK, MODE_TREE, GitStore, Node

Entry = tuple[int, bytes] | Node


@dataclass
class Change:
    op: str  # "write" | "delete" | "rename" | "symlink" (starters only, not the API)
    path: str
    content: bytes | None = None
    to: str | None = None
    kind: str | None = None  # delete and rename: "file" or "folder" when the door means one


class TreeEditor:
    def __init__(self, store: GitStore, root_tree: bytes | None) -> None:
        self.store = store
        self.root = store.load_node(root_tree)

    def apply(self, change: Change) -> None:
        if change.op == "write":
            assert change.content is not None
            existing = self._get(change.path)
            mode = (
                MODE_EXEC if isinstance(existing, tuple) and existing[0] == MODE_EXEC else MODE_FILE
            )
            self._put(change.path, (mode, self.store.add_blob(change.content)))
        elif change.op == "symlink":
            assert change.content is not None  # the link's target, stored as Git does
            self._put(change.path, (MODE_LINK, self.store.add_blob(change.content)))
        elif change.op == "delete":
            self._check_kind(change)
            self._remove(change.path)
        elif change.op == "rename":
            assert change.to is not None
            self._check_kind(change)
            if change.to == change.path or change.to.startswith(change.path + "/"):
                raise Invalid(
                    f"Cannot rename {change.path!r} into itself.",
                    {"path": change.path, "to": change.to},
                    code="invalid_rename",
                )
            if self._get(change.to) is not None:
                raise Conflict(
                    f"Cannot rename onto {change.to!r}: it exists. Delete it first.",
                    {"path": change.path, "to": change.to},
                )
            self._put(change.to, self._remove(change.path))

    def _check_kind(self, change: Change) -> None:
        entry = self._get(change.path)
        if change.kind is None or entry is None:
            return  # nothing there is the NotFound of _remove
        is_folder = isinstance(entry, Node) or entry[0] == MODE_TREE
        if change.kind == "file" and is_folder:
            raise Invalid(
                f"{change.path!r} is a folder; rename or delete it as a folder "
                "(…/folders/{path}).",
                {"path": change.path},
                code="is_a_directory",
            )
        if change.kind == "folder" and not is_folder:
            raise Invalid(
                f"{change.path!r} is a file, not a folder; rename or delete it as a file.",
                {"path": change.path},
                code="not_a_directory",
            )

    def set_entry(self, path: str, entry: tuple[int, bytes] | None) -> None:
        """Put a stored object at `path` as it is (mode and id), or remove what is
        there (nothing there is fine): what a merge of trees writes."""
        if entry is not None:
            self._put(path, entry)
        elif self._get(path) is not None:
            self._remove(path)

    def write(self) -> bytes:
        return self.store.write_node(self.root)

    def _walk(self, path: str, create: bool) -> tuple[list[Node], bytes] | None:
        """The folders from the root down to `path`'s parent, and its last name."""
        parts = path.encode().split(b"/")
        nodes = [self.root]
        for i, part in enumerate(parts[:-1]):
            node = nodes[-1]
            value = node.entries.get(part)
            if value is None:
                if not create:
                    return None
                value = node.entries[part] = Node(dirty=True)
            elif not isinstance(value, Node):
                if value[0] != MODE_TREE:
                    where = b"/".join(parts[: i + 1]).decode()
                    raise Invalid(
                        f"{where!r} is a file, so {path!r} cannot be inside it.",
                        {"path": path},
                        code="parent_is_file",
                    )
                value = node.entries[part] = self.store.load_node(value[1])
            nodes.append(value)
        return nodes, parts[-1]

    def _get(self, path: str) -> Entry | None:
        found = self._walk(path, create=False)
        return found[0][-1].entries.get(found[1]) if found else None

    def _put(self, path: str, entry: Entry) -> None:
        found = self._walk(path, create=True)
        assert found
        nodes, name = found
        existing = nodes[-1].entries.get(name)
        if isinstance(existing, Node) or (existing and existing[0] == MODE_TREE):
            raise Invalid(f"{path!r} is a folder.", {"path": path}, code="is_a_directory")
        nodes[-1].entries[name] = entry
        for node in nodes:
            node.dirty = True

    def _remove(self, path: str) -> Entry:
        found = self._walk(path, create=False)
        entry = found[0][-1].entries.get(found[1]) if found else None
        if found is None or entry is None:
            raise NotFound(f"No file {path!r} to change.", {"path": path})
        nodes, name = found
        del nodes[-1].entries[name]
        for node in nodes:
            node.dirty = True
        return entry
