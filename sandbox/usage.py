"""How much disk a sandbox uses, counted on the host: bytes (blocks) and inodes.

The engine's filesystem has no project quotas, so the runner agent counts what each
live sandbox holds — its volumes, and a release build's writable layer — and stops it
past its caps. The sandbox changes the tree while it is counted, and the agent is root:
1. every folder is opened relative to its parent's descriptor with O_NOFOLLOW |
   O_DIRECTORY, every entry is looked at with fstatat(AT_SYMLINK_NOFOLLOW): a name
   swapped for a link mid-walk fails the open instead of leading across the host;
2. a walk holds one descriptor per level of the path it is in (never one per pending
   folder), and gives up past MAX_DEPTH levels;
3. it stops as soon as a cap is passed, so a million files cost no more than the cap;
4. a walk that cannot finish (a swapped entry, an error, too deep, too slow) is a
   failed count, which the caller treats as over the limit: a sandbox cannot hide what
   it holds by making its count fail.
`walk` is also how a stopped run's files are read back (runs.outputs.walk_volume).
"""

import errno
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass

import docker

from sandbox.engine import engine

MAX_DEPTH = 256
# A count that takes longer fails (counts as over): the caps bound a walk to a few
# tenths of a second, so this is only ever reached by something abnormal.
COUNT_DEADLINE_S = 10.0
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class WalkFailed(OSError):
    """The tree could not be walked safely; `why` says so in words."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


@dataclass
class Entry:
    dir_fd: int  # open while the entry is being looked at (until the walk moves on)
    path: str  # relative to the root, "/"-separated
    name: str
    stat: os.stat_result


def walk(root: str, *, sort: bool = False, max_depth: int = MAX_DEPTH) -> Iterator[Entry]:
    """Every entry under `root` (not root itself), each folder's entries before what is
    inside them, without ever following a link. An entry removed while walked is left
    out; a folder that stopped being one (swapped for a link or a file) raises
    WalkFailed, as does a tree deeper than `max_depth`."""
    top = os.open(root, _DIR_FLAGS)
    # The path being walked: (fd, its path prefix, its sub-folders still to walk).
    levels: list[tuple[int, str, list[str]]] = []
    try:
        fd, prefix = top, ""
        while True:
            pending: list[str] = []
            for name in _names(fd, sort):
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue  # removed since it was listed
                yield Entry(fd, prefix + name, name, st)
                if stat.S_ISDIR(st.st_mode):
                    pending.append(name)
            pending.reverse()  # popped from the end: walked in listing order
            levels.append((fd, prefix, pending))
            fd = -1
            while levels and fd < 0:
                parent, parent_prefix, todo = levels[-1]
                if not todo:
                    os.close(parent)
                    levels.pop()
                    continue
                name = todo.pop()
                if len(levels) >= max_depth:
                    raise WalkFailed(f"folders nested deeper than {max_depth} levels")
                try:
                    fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
                except FileNotFoundError:
                    continue
                except OSError as e:
                    if e.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise WalkFailed(
                            f"{parent_prefix}{name} changed from a folder to "
                            "something else while it was counted"
                        ) from None
                    raise
                prefix = f"{parent_prefix}{name}/"
            if fd < 0:
                return
    finally:
        for level_fd, _, _ in levels:
            os.close(level_fd)
        if fd >= 0 and fd not in {level[0] for level in levels}:
            os.close(fd)


def _names(fd: int, sort: bool) -> Iterator[str]:
    """A folder's names; unsorted, read as they come (a folder of a million files is
    never held whole, and a count stops at its cap)."""
    with os.scandir(fd) as listing:
        if not sort:
            for entry in listing:
                yield entry.name
            return
        names = sorted(entry.name for entry in listing)
    yield from names


@dataclass
class Usage:
    """What a count found. `over` says which cap was passed first (the count stopped
    there), `failed` why the count could not finish (treated as over the limit)."""

    bytes: int = 0
    inodes: int = 0
    over: str = ""  # "inodes" or "bytes"
    failed: str = ""
    seconds: float = 0.0

    def add(self, other: "Usage") -> None:
        self.bytes += other.bytes
        self.inodes += other.inodes
        self.over = self.over or other.over
        self.failed = self.failed or other.failed
        self.seconds += other.seconds


def count(
    roots: list[str],
    max_inodes: int | None = None,
    max_bytes: int | None = None,
    deadline_s: float = COUNT_DEADLINE_S,
) -> Usage:
    """Bytes and inodes under `roots` together (each folder and each inode once: hard
    links count once, as they do on the disk). Stops at the first cap passed. A root
    that is gone counts nothing (its sandbox went meanwhile)."""
    started = time.monotonic()
    usage = Usage()
    seen: set[tuple[int, int]] = set()
    for root in roots:
        try:
            # The root folder itself is one inode and its blocks too.
            st = os.stat(root, follow_symlinks=False)
            usage.inodes += 1
            usage.bytes += st.st_blocks * 512
            for entry in walk(root):
                st = entry.stat
                if st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode):
                    if (st.st_dev, st.st_ino) in seen:
                        continue
                    seen.add((st.st_dev, st.st_ino))
                usage.inodes += 1
                usage.bytes += st.st_blocks * 512
                if max_inodes is not None and usage.inodes > max_inodes:
                    usage.over = "inodes"
                elif max_bytes is not None and usage.bytes > max_bytes:
                    usage.over = "bytes"
                elif usage.inodes % 1024 == 0 and time.monotonic() - started > deadline_s:
                    usage.failed = f"counting took longer than {deadline_s:.0f} s"
                if usage.over or usage.failed:
                    break
        except FileNotFoundError:
            continue
        except WalkFailed as e:
            usage.failed = e.why
        except OSError as e:
            usage.failed = f"{os.strerror(e.errno or 0) or type(e).__name__}"
        if usage.over or usage.failed:
            break
    usage.seconds = time.monotonic() - started
    return usage


def volume_path(name: str) -> str | None:
    """Where a volume's files are on this host; None if the volume is gone."""
    try:
        return str(engine().volumes.get(name).attrs["Mountpoint"])
    except docker.errors.NotFound:
        return None


def writable_layer_path(name: str) -> str | None:
    """Where a container's writable root layer is on this host (overlay2's upper
    folder: under runc and runsc alike, writes to the root land there); None if the
    container is gone. Raises WalkFailed where the storage driver has no such folder:
    that layer cannot be counted, which must not pass for empty."""
    try:
        driver = engine().api.inspect_container(name).get("GraphDriver") or {}
    except docker.errors.NotFound:
        return None
    upper = (driver.get("Data") or {}).get("UpperDir")
    if not upper:
        raise WalkFailed(
            f"the engine's storage driver ({driver.get('Name')}) shows no "
            "writable layer to count; Berth counts it with overlay2"
        )
    return str(upper)


def volume_bytes(name: str) -> int | None:
    """Bytes used under a (stopped) volume, counted without following links."""
    path = volume_path(name)
    return None if path is None else count([path], deadline_s=600).bytes
