"""What a session's /workspace holds, as a Git tree in a scratch store of the read's own
(sessions.snapstore), which sees the workspace's objects and never adds to them. The
store is the web host's: the session's host's agent reads the files through the exec
channel (`manifest`, `read`: sandbox/in_image/berth_files.py; sessions.reader) and
hands each answer to a read in progress here through the internal API, which says what
to list and read next. No host ever checks out a session's tree, reads its volume's
host path, or follows a link in it (links are data, as Git stores them).

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

A read in progress lives in daphne's memory (`OPEN`, by a token only its agent's host
may use): a daphne restart lets it go, and so does any read's next call once it has
been quiet for IDLE_S (its store then goes with the next sweep); its rows stay pending
for the agent's next try.
"""

import base64
import binascii
import logging
import re
import secrets as stdlib_secrets
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone
from dulwich.objects import Blob, ObjectID

from core import fanout
from core.errors import BerthError, Invalid, NotFound
from runs import secrets
from runs.outputs import LINK_OUT_OF_TREE, MAX_SKIPPED_LISTED, flatten, ignore_filter, is_ignored
from sessions import snapstore
from sessions.lifecycle import group_name
from sessions.models import Session, SessionState, Snapshot, SnapshotState
from workspaces.gitstore import MODE_EXEC, MODE_FILE, MODE_LINK, MODE_SUBMODULE, Node
from workspaces.paths import clean_path, link_climbs_out
from workspaces.treesize import check_tree

HEX40 = re.compile(rb"[0-9a-f]{40}")


log = logging.getLogger("berth.sessions")


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
    the web host; the channel's answers are fed in by the read's doors)."""

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
            given = raw.get("size")
            size = given if isinstance(given, int) and given >= 0 else 0
            if raw.get("sha") is None:
                self.skip(path, f"larger than {settings.WORKSPACE_MAX_FILE_BYTES >> 20} MB")
                self.keep_old(path)
                return None
            self.count(size)
            mode = MODE_EXEC if raw.get("mode") == "100755" else MODE_FILE
            sha = str(raw["sha"]).encode()
            if not HEX40.fullmatch(sha):
                self.wanted[name] = (path, mode)  # the sandbox's word for it is no id: read
            elif self.old.get(path) == (mode, sha) or (
                ObjectID(sha) in self.store.repo.object_store
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


def reads_kept() -> set[str]:
    """The scratch stores a door may still open: each session's newest done read, for
    SESSION_READ_KEEP_S after it was done (older reads of it were replaced)."""
    since = timezone.now() - timedelta(seconds=settings.SESSION_READ_KEEP_S)
    newest: dict[int, tuple[int, str]] = {}
    done = (
        Snapshot.objects.filter(state=SnapshotState.DONE, done_at__gte=since)
        .exclude(scratch="")
        .exclude(session__state=SessionState.DELETED)
        .values_list("session_id", "pk", "scratch")
    )
    for session_id, pk, name in done:
        if session_id not in newest or pk > newest[session_id][0]:
            newest[session_id] = (pk, name)
    return {name for _, name in newest.values()}


def pending(session: Session) -> list[Snapshot]:
    return list(Snapshot.objects.filter(session=session, state=SnapshotState.PENDING))


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


# -- reads in progress: driven by the session's host's agent (sessions.reader) --------


@dataclass
class _Open:
    session: Session
    rows: list[int]
    base: str
    scratch: snapstore.Scratch
    reading: _Reading
    touched: float = field(default_factory=time.monotonic)


OPEN: dict[str, _Open] = {}
_open_lock = threading.RLock()
IDLE_S = 5 * 60.0  # a read whose agent went quiet: let go (its rows stay pending)


class NoRead(NotFound):
    """No read in progress by that token for the asking host."""


def open_read(session: Session) -> str | None:
    """A read of the session's files for every snapshot asked of it: its token, or None
    when none is pending (or the store could not be made: the rows say so)."""
    with _open_lock:
        _let_go(lambda o: o.session.pk == session.pk or time.monotonic() - o.touched > IDLE_S)
        rows = pending(session)
        if not rows:
            return None
        base = session.base_commit
        try:
            scratch = snapstore.begin(
                session.public_id, session.workspace.repo_path, session.runner_host
            )
        except OSError as e:  # the web host's disk (full, or the store removed under it)
            error = f"The session's files could not be stored ({e}); try again."
            _record(session, [r.pk for r in rows], base, Tree(None, error=error, unanswered=True))
            return None
        try:
            masker = secrets.Masker(secrets.open_sealed(session.secrets_sealed))
            reading = _Reading(scratch, base, masker)
        except BaseException:
            scratch.end(False)
            raise
        token = stdlib_secrets.token_urlsafe(16)
        OPEN[token] = _Open(session, [r.pk for r in rows], base, scratch, reading)
        return token


def _let_go(which: Any) -> None:
    for token, found in list(OPEN.items()):
        if which(found):
            del OPEN[token]
            found.scratch.end(False)


def _held(token: str, host: str) -> _Open:
    _let_go(lambda o: time.monotonic() - o.touched > IDLE_S)  # quiet agents' reads
    found = OPEN.get(token)
    if found is None or found.session.runner_host != host:
        raise NoRead("No read of a session's files by that token is in progress here.")
    found.touched = time.monotonic()
    return found


def take_entries(token: str, host: str, raws: list[dict[str, Any]]) -> list[str] | None:
    """A manifest answer taken in: the folders to list next, or None when the read
    ended here (past the caps or the bound: its rows say so)."""
    with _open_lock:
        found = _held(token, host)
        try:
            return found.reading.entries_of(raws)
        except Exception as e:  # past the caps or the bound, or an answer we cannot take
            _end(token, found, _failed(found, e))
            return None


def wanted(token: str, host: str) -> list[str]:
    """The files to read (by the names the sandbox has): those whose content the store
    does not hold yet."""
    with _open_lock:
        return sorted(_held(token, host).reading.wanted)


def take_contents(token: str, host: str, raws: list[dict[str, Any]]) -> bool:
    """Files read taken in (scanned, stored or withheld); False when the read ended."""
    with _open_lock:
        found = _held(token, host)
        try:
            found.reading.contents(raws)
        except Exception as e:
            _end(token, found, _failed(found, e))
            return False
        return True


def finish(token: str, host: str, error: str = "", unanswered: bool = False) -> None:
    """The read's tree written and recorded (or, with `error`, its failure as the
    agent saw it: the exec channel did not answer)."""
    with _open_lock:
        found = _held(token, host)
        if error:
            out = Tree(None, error=error, unanswered=unanswered)
        else:
            try:
                out = found.reading.finish()
            except Exception as e:
                out = _failed(found, e)
        _end(token, found, out)


def _failed(found: _Open, e: Exception) -> Tree:
    """The read ended here: its rows say why. An answer of the sandbox's that cannot be
    taken ends it too (recorded, never a 500 the agent would ask again and again)."""
    out = found.reading.out
    out.tree = None
    if not isinstance(e, (OverCaps, snapstore.Full)):
        log.exception("session %s: its read failed", found.session.public_id)
        out.error = f"The session's files could not be read ({type(e).__name__}); try again."
    elif isinstance(e, snapstore.Full):
        out.unanswered = True
        out.error = f"The session's files were not read: {e}. Try again in a few minutes."
    else:
        out.error = (
            f"The session's /workspace is past what a workspace may hold ({e}); its "
            "changes cannot be read or committed. Remove what it should not keep (or "
            "list it in .gitignore)."
        )
    return out


def _end(token: str, found: _Open, out: Tree) -> None:
    del OPEN[token]
    recorded = False
    try:
        recorded = _record(found.session, found.rows, found.base, out)
    finally:
        found.scratch.end(recorded and out.tree is not None)
    if recorded and out.tree:
        snapstore.remove_older(out.scratch)
