"""Where a read of a session's files keeps its Git objects: a scratch store of the read's
own, never the workspace's. A tenant who rewrites a large file and asks for its changes
again and again would otherwise grow the workspace's store with objects nobody
references; a commit copies in only what its new commit needs (sessions.changes).

The stores are the web host's, like the workspace's (the session's host's agent reads
the files through the exec channel and sends them: sessions.reader, sessions.snapshot).
A store is a bare repository, `DATA_DIR/session-reads/<host>/<session>/<token>.git`
(`<host>`: the session's), whose `objects/info/alternates` names the workspace's
objects folder: reads see both stores, writes land in the scratch one alone.
`<token>.lock` beside it is held with flock: exclusively by daphne while a read writes
the store (from before the folder exists until its rows say done), shared by a door
while it reads it; a removal takes it exclusively without waiting, and leaves a store
in use for a later one. So a store never goes from under its writer or a reader,
whoever removes it.

A store goes:
1. once a newer read of its session is done (the agent, right after recording it);
2. SESSION_READ_KEEP_S after it was done, or at once when no done row names it (a
   read a crash cut short): the web host's sweep (`sessions.tasks.sweep_reads`, beat);
3. with its session, at delete.
A host's sessions' stores hold at most SESSION_READS_MAX_BYTES together: each object is
charged before it is written (`Space`), and a read past the bound fails (`Full`).
"""

import contextlib
import fcntl
import hashlib
import logging
import os
import re
import secrets
import shutil
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings
from dulwich.objects import ShaFile

from core.errors import BerthError
from workspaces.gitstore import GitStore

log = logging.getLogger("berth.sessions")

ROOT = "session-reads"
_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}")


class ReadGone(BerthError):
    """A done read whose store was removed before a door could open it."""

    status = 503
    code = "session_not_read"


class Full(Exception):
    """The host's stores would pass SESSION_READS_MAX_BYTES."""


def _part(name: str) -> str:
    """A host's or a session's name as one folder name (a host's is the operator's word)."""
    return name if _PART.fullmatch(name) else hashlib.sha256(name.encode()).hexdigest()[:32]


def root() -> Path:
    return settings.DATA_DIR / ROOT


def host_dir(host: str | None = None) -> Path:
    return root() / _part(host or settings.SANDBOX_HOST)


def _path_of(name: str) -> Path:
    """The store a row names (its host, session and token folders: nothing else)."""
    parts = name.split("/")
    if len(parts) != 3 or not all(_PART.fullmatch(p) for p in parts):
        raise ReadGone("The read of the session's files has no store; ask again.")
    return root().joinpath(*parts[:2], parts[2] + ".git")


def _lock_of(git_dir: Path) -> Path:
    return git_dir.with_suffix(".lock")


def _hold(lock: Path, how: int, create: bool = True) -> int | None:
    """An flock on `lock`, or None: held elsewhere (with LOCK_NB), or no such file
    (without `create`). The file is checked to be the one locked: a removal unlinks it
    while a waiter may still be about to lock the old one."""
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_CREAT if create else 0)
    while True:
        try:
            fd = os.open(lock, flags, 0o600)
        except FileNotFoundError:
            return None
        try:
            fcntl.flock(fd, how)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            same = os.stat(lock, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)
        if not create:
            return None


def _remove(git_dir: Path) -> bool:
    """A store and its lock gone, unless someone holds it (False: a later removal)."""
    fd = _hold(_lock_of(git_dir), fcntl.LOCK_EX | fcntl.LOCK_NB)
    if fd is None:
        return False
    try:
        shutil.rmtree(git_dir, ignore_errors=True)  # never follows a link
        _lock_of(git_dir).unlink(missing_ok=True)
    finally:
        os.close(fd)
    return True


def _size(top: Path, skip: set[Path]) -> int:
    total = 0
    for folder, dirs, files in os.walk(top):  # links are not followed
        dirs[:] = [d for d in dirs if Path(folder, d) not in skip]
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except FileNotFoundError:
                continue  # removed meanwhile
    return total


class Space:
    """What one host's sessions' stores hold, against SESSION_READS_MAX_BYTES. Daphne is
    the one writer of the folder: stores being written are counted by what was charged
    to them, the rest by measuring the folder (again only when the sum nears the bound:
    a removal since only makes the last figure too high)."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.lock = threading.Lock()
        self.on_disk: int | None = None
        self.charged: dict[Path, int] = {}

    def begin(self, git_dir: Path) -> None:
        with self.lock:
            self.charged[git_dir] = 0

    def charge(self, git_dir: Path, size: int) -> None:
        with self.lock:
            if self.on_disk is None or self._over(size):
                self.on_disk = _size(host_dir(self.host), set(self.charged))
                if self._over(size):
                    raise Full(
                        "the space this host keeps for reads of sessions' files "
                        f"(SESSION_READS_MAX_MB, {settings.SESSION_READS_MAX_BYTES >> 20} MB) "
                        "is full"
                    )
            self.charged[git_dir] += size

    def _over(self, size: int) -> bool:
        held = (self.on_disk or 0) + sum(self.charged.values())
        return held + size > settings.SESSION_READS_MAX_BYTES

    def end(self, git_dir: Path, kept: bool) -> None:
        with self.lock:
            size = self.charged.pop(git_dir, 0)
            if kept and self.on_disk is not None:
                self.on_disk += size  # raw sizes: at least what the loose objects take


_SPACES: dict[str, Space] = {}
_spaces_lock = threading.Lock()


def space_of(host: str) -> Space:
    with _spaces_lock:
        return _SPACES.setdefault(host, Space(host))


class Scratch:
    """A store this process is writing, held exclusively."""

    def __init__(self, name: str, git_dir: Path, fd: int, store: GitStore, space: Space) -> None:
        self.name, self.git_dir, self.fd, self.store = name, git_dir, fd, store
        self.space = space

    def charge(self, size: int) -> None:
        self.space.charge(self.git_dir, size)

    def add(self, obj: ShaFile) -> None:
        self.charge(obj.raw_length())
        self.store.repo.object_store.add_object(obj)

    def end(self, keep: bool) -> None:
        """Kept for its rows, or removed; let go either way."""
        self.store.close()
        try:
            if not keep:
                shutil.rmtree(self.git_dir, ignore_errors=True)
                _lock_of(self.git_dir).unlink(missing_ok=True)
        finally:
            os.close(self.fd)
            self.space.end(self.git_dir, keep)


def begin(session_public_id: str, workspace_repo: Path, host: str) -> Scratch:
    """A new store for one read of the files of a session on `host`, seeing the
    workspace's objects."""
    folder = host_dir(host) / _part(session_public_id)
    space = space_of(host)
    token = secrets.token_hex(8)
    git_dir = folder / f"{token}.git"
    fd = None
    while fd is None:  # a sweep may take the session's folder once it is empty
        folder.mkdir(parents=True, exist_ok=True)
        # Held before the store's folder exists: a sweep never takes a store being made.
        fd = _hold(_lock_of(git_dir), fcntl.LOCK_EX)
    space.begin(git_dir)
    try:
        git_dir.mkdir()
        for sub in ("objects/info", "refs"):
            (git_dir / sub).mkdir(parents=True)
        (git_dir / "HEAD").write_text("ref: refs/heads/main\n")
        (git_dir / "objects" / "info" / "alternates").write_text(
            f"{(Path(workspace_repo) / 'objects').absolute()}\n"
        )
        store = GitStore(git_dir)
    except BaseException:
        shutil.rmtree(git_dir, ignore_errors=True)
        _lock_of(git_dir).unlink(missing_ok=True)
        os.close(fd)
        space.end(git_dir, kept=False)
        raise
    name = f"{host_dir(host).name}/{folder.name}/{token}"
    return Scratch(name, git_dir, fd, store, space)


@contextmanager
def opened(name: str) -> Iterator[GitStore]:
    """The store a done read wrote (`Snapshot.scratch`), held shared while the block
    reads it: the one way any door opens a read's tree. ReadGone once it was removed."""
    git_dir = _path_of(name)
    fd = _hold(_lock_of(git_dir), fcntl.LOCK_SH, create=False)
    if fd is not None and not git_dir.is_dir():
        os.close(fd)
        fd = None
    if fd is None:
        raise ReadGone(
            "The read of the session's files was replaced by a newer one, or kept past "
            f"SESSION_READ_KEEP_S ({settings.SESSION_READ_KEEP_S} s), before it was "
            "used; ask again."
        )
    try:
        store = GitStore(git_dir)
        try:
            yield store
        finally:
            store.close()
    finally:
        os.close(fd)


def _stores(folder: Path) -> Iterator[Path]:
    """The stores of one session's folder, and the lock of any store a crash cut short
    before its folder was made (as the store it would have been)."""
    try:
        names = {e.name for e in os.scandir(folder)}
    except FileNotFoundError:
        return
    tokens = {n.rsplit(".", 1)[0] for n in names if n.endswith((".git", ".lock"))}
    for token in sorted(tokens):
        yield folder / f"{token}.git"


def _tidy(folder: Path) -> None:
    with contextlib.suppress(OSError):
        folder.rmdir()  # only once empty


def remove_older(name: str) -> None:
    """Every other store of the session whose read `name` was just recorded (a session's
    files are read one read at a time: each other is older)."""
    git_dir = _path_of(name)
    for other in _stores(git_dir.parent):
        if other != git_dir:
            _remove(other)


def remove_session(session_public_id: str) -> None:
    """A deleted session's stores, on every host's folder (one in use goes with the
    next sweep of its host)."""
    try:
        hosts = list(os.scandir(root()))
    except FileNotFoundError:
        return
    for host in hosts:
        folder = Path(host.path) / _part(session_public_id)
        for git_dir in _stores(folder):
            _remove(git_dir)
        _tidy(folder)


def sweep(keep: Iterable[str]) -> int:
    """Every host's stores but those named in `keep` removed, save any in use; how many
    went."""
    kept = set()
    for name in keep:
        try:
            kept.add(_path_of(name))
        except ReadGone:
            continue
    removed = 0
    try:
        hosts = [Path(e.path) for e in os.scandir(root()) if e.is_dir()]
    except FileNotFoundError:
        return 0
    sessions = []
    for host in hosts:
        with contextlib.suppress(FileNotFoundError):
            sessions += [Path(e.path) for e in os.scandir(host) if e.is_dir()]
    for folder in sessions:
        for git_dir in _stores(folder):
            if git_dir not in kept and _remove(git_dir):
                removed += 1
        _tidy(folder)
    return removed
