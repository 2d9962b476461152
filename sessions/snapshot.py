"""What a session's /workspace holds, read by the runner agent through the exec channel
(`manifest`, `read`: sandbox/in_image/berth_files.py) into a Git tree in a scratch
store of the read's own (sessions.snapstore), which sees the workspace's objects and
never adds to them: the host never checks out a session's tree, never reads its
volume's host path, and never follows a link in it (links are data, as Git stores them).

1. Folders are listed level by level from /workspace; a folder new to the base commit
   that its .gitignore ignores is not entered (a virtualenv, node_modules), nor a
   `.git`; every path is checked with the path rules, and the whole against the tree
   caps as it grows, so a session past them is never read in full.
2. A file whose blob id the store already has is taken as it is; only the others are
   read, in answers of at most READ_BYTES, and scanned for the values of the secrets
   its execs were granted: a file holding one keeps its base version (or stays out),
   withheld, as a run's outputs do (runs.outputs).
3. The tree is written and checked with workspaces.treesize like any commit's. Every
   object is charged against the host's bound on scratch stores before it is written.
4. Once recorded, the session's older reads' stores go (sessions.snapstore).
"""

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.utils import timezone
from dulwich.objects import Blob, ObjectID

from core import fanout
from core.errors import BerthError, Invalid
from runs import secrets
from runs.outputs import LINK_OUT_OF_TREE, MAX_SKIPPED_LISTED, flatten, ignore_filter, is_ignored
from sandbox.loop import db, on_thread
from sessions import snapstore
from sessions.channel import ChannelError, Endpoint, ask, channel_of
from sessions.lifecycle import group_name
from sessions.models import Session, Snapshot, SnapshotState
from workspaces.gitstore import MODE_EXEC, MODE_FILE, MODE_LINK, MODE_SUBMODULE, Node
from workspaces.paths import clean_path, link_climbs_out
from workspaces.treesize import check_tree

LIST_ENTRIES = 2000  # per manifest answer
LIST_DIRS = 200  # folders asked for in one manifest request
READ_BYTES = 4 << 20  # per read answer (a larger file comes alone)
TIMEOUT_S = 60.0
MAX_ANSWER = 24 << 20  # a read answer: one file at the file cap, in base64


class OverCaps(Exception):
    pass


@dataclass
class Tree:
    tree: str | None  # None past the caps (error says why)
    scratch: str = ""  # the store holding it (snapstore.Scratch.name)
    skipped: list[dict[str, str]] = field(default_factory=list)
    skipped_count: int = 0
    withheld: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""
    unanswered: bool = False  # the channel did not answer: worth asking again (503)


class _Reading:
    """One read of a session's /workspace against its base commit (sync parts, run on
    a thread; the channel's answers are fed in by `read_tree`)."""

    def __init__(
        self, scratch: snapstore.Scratch, base_commit: str, masker: secrets.Masker
    ) -> None:
        self.scratch, self.store, self.masker = scratch, scratch.store, masker
        self.old = flatten(self.store, self.store.commit(base_commit).tree)
        self.ignore = ignore_filter(self.store, self.old)
        # Folders that hold a tracked file: always entered, ignored or not (git's rule
        # for tracked files), or their files would read as deleted.
        self.tracked_dirs = {
            "/".join(parts[:i])
            for parts in (p.split("/") for p in self.old)
            for i in range(1, len(parts))
        }
        self.root = Node(dirty=True)
        self.entries = self.bytes = 0
        self.out = Tree(None)
        # Files to read, by the name the sandbox has (a name in another Unicode form
        # than the path rules' NFC is read by its own): (path in the tree, mode).
        self.wanted: dict[str, tuple[str, int]] = {}

    def skip(self, path: str, why: str) -> None:
        self.out.skipped_count += 1
        if len(self.out.skipped) < MAX_SKIPPED_LISTED:
            self.out.skipped.append({"path": self.masker.text(path), "why": why})

    def count(self, size: int) -> None:
        self.entries += 1
        self.bytes += size
        if self.entries > settings.WORKSPACE_MAX_TREE_ENTRIES:
            raise OverCaps(f"more than {settings.WORKSPACE_MAX_TREE_ENTRIES:,} paths")
        if self.bytes > settings.WORKSPACE_MAX_TREE_BYTES:
            raise OverCaps(f"more than {settings.WORKSPACE_MAX_TREE_BYTES >> 20:,} MB of files")

    def put(self, path: str, entry: tuple[int, bytes]) -> None:
        node = self.root
        parts = path.encode().split(b"/")
        for part in parts[:-1]:
            child = node.entries.get(part)
            if not isinstance(child, Node):
                child = node.entries[part] = Node(dirty=True)
            node = child
        node.entries[parts[-1]] = entry

    def keep_old(self, path: str) -> None:
        if path in self.old:
            self.put(path, self.old[path])

    def entries_of(self, raws: list[dict[str, Any]]) -> list[str]:
        """A manifest answer taken in: the folders to list next."""
        folders = []
        for raw in raws:
            folder = self.entry(raw)
            if folder is not None:
                self.count(0)
                folders.append(folder)
        return folders

    def contents(self, raws: list[dict[str, Any]]) -> None:
        for raw in raws:
            self.content(raw)

    def entry(self, raw: dict[str, Any]) -> str | None:
        """One manifest entry taken in; a folder to list next is returned."""
        name = str(raw.get("path") or "")
        try:
            name.encode("utf-8")
            path = clean_path(name)
        except (UnicodeEncodeError, Invalid):
            self.skip(name.encode("utf-8", "replace").decode(), "not a path Git or Berth can hold")
            return None
        kind = raw.get("type")
        if kind == "dir":  # listed next by its own name
            if path in self.tracked_dirs:
                return name
            return None if is_ignored(self.ignore, self.old, path + "/") else name
        if is_ignored(self.ignore, self.old, path):
            return None
        names = self.masker.scanner()
        target = str(raw.get("target")).encode("utf-8", "surrogateescape")
        names.feed(path.encode() + (b"\0" + target if kind == "link" else b""))
        if names.names():
            self.withhold(path, names.names())  # a value in a name would be in a tree
            return None
        if kind == "link" and link_climbs_out(path, target):
            # No sandbox could hold the commit (the engine refuses it): never committed.
            self.skip(path, LINK_OUT_OF_TREE)
            self.keep_old(path)
            return None
        if kind == "link":
            self.count(len(target))
            self.put(path, (MODE_LINK, self._blob(target)))
        elif kind == "file":
            size = int(raw.get("size") or 0)
            if raw.get("sha") is None:
                self.skip(path, f"larger than {settings.WORKSPACE_MAX_FILE_BYTES >> 20} MB")
                self.keep_old(path)
                return None
            self.count(size)
            mode = MODE_EXEC if raw.get("mode") == "100755" else MODE_FILE
            sha = str(raw["sha"]).encode()
            if self.old.get(path) == (mode, sha) or (
                len(sha) == 40 and ObjectID(sha) in self.store.repo.object_store
            ):
                self.put(path, (mode, sha))  # content the store holds already
            else:
                self.wanted[name] = (path, mode)
        else:
            self.skip(path, "not a file, folder or symlink")
        return None

    def content(self, raw: dict[str, Any]) -> None:
        """One file read: scanned, then stored (or withheld)."""
        name = str(raw.get("path"))
        if name not in self.wanted:
            return  # not asked for
        path, mode = self.wanted.pop(name)
        if raw.get("type") != "file" or raw.get("too_large"):
            if raw.get("too_large"):
                self.skip(path, f"larger than {settings.WORKSPACE_MAX_FILE_BYTES >> 20} MB")
                self.keep_old(path)
            return  # gone, or no longer a file, since it was listed
        try:
            data = base64.b64decode(str(raw.get("data") or ""), validate=True)
        except (binascii.Error, ValueError):
            self.skip(path, "unreadable")
            return
        scanner = self.masker.scanner()
        scanner.feed(data)
        if scanner.names():
            self.withhold(path, scanner.names())
            return
        self.put(path, (mode, self._blob(data)))

    def withhold(self, path: str, names: list[str]) -> None:
        self.out.withheld.append({"path": self.masker.text(path), "secrets": names})
        self.keep_old(path)

    def _blob(self, data: bytes) -> bytes:
        blob = Blob.from_string(data)
        if blob.id not in self.store.repo.object_store:  # the workspace's objects too
            self.scratch.add(blob)
        return blob.id

    def finish(self) -> Tree:
        for path, entry in self.old.items():
            if entry[0] == MODE_SUBMODULE:
                self.put(path, entry)  # never placed in /workspace, so not deleted
        self.scratch.charge(_tree_bytes(self.root))
        tree = self.store.write_node(self.root)
        try:
            check_tree(self.store.repo.object_store, tree)
        except BerthError as e:
            raise OverCaps(e.message) from None
        self.out.tree, self.out.scratch = tree.decode(), self.scratch.name
        return self.out


def _tree_bytes(node: Node) -> int:
    """What writing a node's trees adds: every folder below is written (each entry: its
    mode in octal, a space, its name, a NUL and a 20-byte id)."""
    size = 0
    for name, value in node.entries.items():
        mode = 0o40000 if isinstance(value, Node) else value[0]
        size += len(f"{mode:o}") + len(name) + 22
        if isinstance(value, Node):
            size += _tree_bytes(value)
    return size


async def read_tree(
    ns: Endpoint, session: Session, base_commit: str, scratch: snapstore.Scratch
) -> Tree:
    """The session's /workspace as a tree against `base_commit`, written into `scratch`
    (ChannelError when the channel does not answer). Store and database work goes to
    threads, one at a time."""
    values = secrets.open_sealed(session.secrets_sealed)  # sealed for this host
    reading = await on_thread(_Reading)(scratch, base_commit, secrets.Masker(values))
    try:
        await _list(ns, reading)
        await _read(ns, reading)
        out: Tree = await on_thread(reading.finish)()
        return out
    except OverCaps as e:
        out = reading.out
        out.tree = None
        out.error = (
            f"The session's /workspace is past what a workspace may hold ({e}); its "
            "changes cannot be read or committed. Remove what it should not keep (or "
            "list it in .gitignore)."
        )
        return out
    except snapstore.Full as e:
        out = reading.out
        out.tree, out.unanswered = None, True
        out.error = f"The session's files were not read: {e}. Try again in a few minutes."
        return out


async def _list(ns: Endpoint, reading: _Reading) -> None:
    level = [""]
    while level:
        below: list[str] = []
        for at in range(0, len(level), LIST_DIRS):
            dirs, start = level[at : at + LIST_DIRS], None
            while True:
                answer = await _ask(
                    ns,
                    {
                        "op": "manifest",
                        "dirs": dirs,
                        "start": start,
                        "max_entries": LIST_ENTRIES,
                        "max_file_bytes": settings.WORKSPACE_MAX_FILE_BYTES,
                    },
                )
                below += await on_thread(reading.entries_of)(answer.get("entries") or [])
                start = answer.get("next")
                if not start:
                    break
        level = below


async def _read(ns: Endpoint, reading: _Reading) -> None:
    paths = sorted(reading.wanted)
    while paths:
        answer = await _ask(
            ns,
            {
                "op": "read",
                "paths": paths,
                "max_bytes": READ_BYTES,
                "max_file_bytes": settings.WORKSPACE_MAX_FILE_BYTES,
            },
        )
        files = answer.get("files") or []
        await on_thread(reading.contents)(files)
        rest = list(answer.get("rest") or [])
        if not files or len(rest) >= len(paths):
            raise ChannelError("the exec channel read nothing")
        paths = rest


async def _ask(ns: Endpoint, request: dict[str, Any]) -> dict[str, Any]:
    answer = await ask(ns, request, timeout=TIMEOUT_S, max_answer=MAX_ANSWER)
    if not answer.get("ok"):
        raise ChannelError(f"the exec channel refused: {answer.get('error')}")
    return answer


def pending(session: Session) -> list[Snapshot]:
    return list(Snapshot.objects.filter(session=session, state=SnapshotState.PENDING))


async def take(session: Session) -> None:
    """Every snapshot asked of the session, answered by one read into a scratch store of
    its own (the caller holds the session's lock, and it is ready with its syncs
    applied); the session's older reads' stores go once it is recorded."""
    rows = await db(pending)(session)
    if not rows:
        return
    assert session.run is not None and session.run.sandbox is not None
    base = await db(
        lambda: Session.objects.values_list("base_commit", flat=True).get(pk=session.pk)
    )()
    recorded, scratch = False, None
    try:
        try:
            scratch = await on_thread(snapstore.begin)(
                session.public_id, session.workspace.repo_path
            )
            ns = await on_thread(channel_of)(session.run.sandbox)
            out = await read_tree(ns, session, base, scratch)
        except ChannelError as e:
            out = Tree(
                None,
                error=f"The session's exec channel did not answer ({e}); try again.",
                unanswered=True,
            )
        except OSError as e:  # the host's disk (full, or the store removed under it)
            out = Tree(
                None,
                error=f"The session's files could not be stored on its host ({e}); try again.",
                unanswered=True,
            )
        recorded = await db(_record)(session, [r.pk for r in rows], base, out)
    finally:
        if scratch is not None:
            await on_thread(scratch.end)(recorded and out.tree is not None)
    if recorded and out.tree:
        await on_thread(snapstore.remove_older)(out.scratch)


def _record(session: Session, pks: list[int], base: str, out: Tree) -> bool:
    done = Snapshot.objects.filter(pk__in=pks, state=SnapshotState.PENDING).update(
        state=SnapshotState.DONE if out.tree else SnapshotState.FAILED,
        base_commit=base,
        tree=out.tree or "",
        scratch=out.scratch if out.tree else "",
        skipped=out.skipped,
        skipped_count=out.skipped_count,
        withheld=out.withheld,
        error=out.error,
        unanswered=out.unanswered,
        done_at=timezone.now(),
    )
    fanout.group_send(group_name(session.public_id), {"type": "session.snapshot"})
    return bool(done)
