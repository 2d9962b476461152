"""berth-session's file operations on /workspace (imported by berth_session.py).

Run inside the sandbox as the sandbox user, so what they write is the session's own and
nothing the host does ever goes through the volume's host path. No symlink is followed
anywhere: every folder on a path is opened relative to its parent with O_NOFOLLOW (and
checked to be that folder), and a file is opened with O_NOFOLLOW and checked with fstat
before it is read.

- `apply`: for each file, its current Git blob id is compared with the one the host
  thinks is there (`base`); only a match is replaced (a temporary file in the same
  folder, renamed over it) or deleted. A file that already holds the new content
  counts as applied; anything else is left alone and reported as a conflict. Between
  the comparison and the rename a process in the sandbox could still write the file;
  that process is the session's own, so it can only lose its own write.
- `manifest`: the entries of some folders, each file with its blob id, mode and size.
- `read`: files' contents, within a byte budget per answer.
Paths are checked again here: relative, no empty, `.`, `..` or `.git` component, no NUL.
"""

import base64
import contextlib
import hashlib
import itertools
import os
import stat
from typing import Any

ROOT = "/workspace"
LINK = "120000"
EXEC = "100755"
FILE = "100644"
READ_BLOCK = 1 << 16
_temp_names = itertools.count()


class BadPath(ValueError):
    pass


class Refused(Exception):
    """This path cannot be applied; the message says why (a conflict)."""


def parts_of(path: Any) -> list[str]:
    if not isinstance(path, str) or not path or path.startswith("/") or "\x00" in path:
        raise BadPath(f"not a relative path: {path!r}")
    parts = path.split("/")
    if any(p in ("", ".", "..") or p.casefold() == ".git" for p in parts):
        raise BadPath(f"not a path inside the workspace: {path!r}")
    return parts


def blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\x00" % len(data) + data, usedforsecurity=False).hexdigest()


def _why_not_folder(fd: int, name: str) -> str:
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return "a folder on its path disappeared"
    if stat.S_ISLNK(st.st_mode):
        return "a folder on its path is a symlink"
    return "a folder on its path is not a folder"


def _open_folder(name: str, parent: int) -> int:
    """`name` in `parent`, only if it is a folder and not a link (OSError otherwise).

    O_NOFOLLOW without O_DIRECTORY: gVisor follows a link to a folder when both are
    given (runsc here opens it), and refuses it with ELOOP when only O_NOFOLLOW is. The
    fd is then checked to be a folder, and to be the entry `name` names (not a link)."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=parent)
    try:
        st = os.fstat(fd)
        entry = os.stat(name, dir_fd=parent, follow_symlinks=False)
        if not stat.S_ISDIR(st.st_mode) or (st.st_dev, st.st_ino) != (
            entry.st_dev,
            entry.st_ino,
        ):
            raise NotADirectoryError(name)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_folders(parts: list[str], create: bool) -> list[int] | None:
    """The fds of /workspace and each folder down to the path's parent (None when one
    is missing and not to be made); each opened relative to the last, never a link."""
    fds = [os.open(ROOT, os.O_RDONLY | os.O_DIRECTORY)]
    try:
        for name in parts[:-1]:
            try:
                fds.append(_open_folder(name, fds[-1]))
                continue
            except FileNotFoundError:
                if not create:
                    close_all(fds)
                    return None
            except OSError:  # ELOOP (a link), ENOTDIR (a file)
                raise Refused(_why_not_folder(fds[-1], name)) from None
            with contextlib.suppress(FileExistsError):  # made meanwhile: checked below
                os.mkdir(name, 0o755, dir_fd=fds[-1])
            try:
                fds.append(_open_folder(name, fds[-1]))
            except OSError:
                raise Refused(_why_not_folder(fds[-1], name)) from None
    except BaseException:
        close_all(fds)
        raise
    return fds


def close_all(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


def current(fd: int, name: str, max_bytes: int = -1) -> dict[str, Any]:
    """What is at `name` in the folder `fd`: its kind, and for a file or a link its
    blob id (a link's is its target's, as Git stores it) and size."""
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return {"type": "absent"}
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(name, dir_fd=fd)
        data = os.fsencode(target)
        return {"type": "link", "sha": blob_id(data), "size": len(data), "target": target}
    if stat.S_ISDIR(st.st_mode):
        return {"type": "dir"}
    if not stat.S_ISREG(st.st_mode):
        return {"type": "other"}
    mode = EXEC if st.st_mode & 0o100 else FILE
    if 0 <= max_bytes < st.st_size:
        return {"type": "file", "mode": mode, "size": st.st_size, "sha": None}
    try:
        file_fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
    except OSError:
        return {"type": "other"}  # swapped for a link or a FIFO meanwhile
    try:
        st = os.fstat(file_fd)
        if not stat.S_ISREG(st.st_mode):
            return {"type": "other"}
        digest = hashlib.sha1(b"blob %d\x00" % st.st_size, usedforsecurity=False)
        size = 0
        while block := os.read(file_fd, READ_BLOCK):
            digest.update(block)
            size += len(block)
        if size != st.st_size:  # written meanwhile: an id no version has
            return {"type": "file", "mode": mode, "size": size, "sha": "changing"}
        return {"type": "file", "mode": mode, "size": size, "sha": digest.hexdigest()}
    finally:
        os.close(file_fd)


def _holds(now: dict[str, Any], sha: str | None, mode: str | None) -> bool:
    """Whether the current entry is the version (sha, mode); None is absent."""
    if sha is None:
        return bool(now["type"] == "absent")
    wanted = "link" if mode == LINK else "file"
    return bool(now["type"] == wanted and now.get("sha") == sha)


def _conflict_why(now: dict[str, Any]) -> str:
    return {
        "absent": "deleted in the session",
        "dir": "a folder in the session",
        "link": "a symlink in the session",
        "other": "not a regular file in the session",
    }.get(now["type"], "changed in the session")


def _put(fd: int, name: str, data: bytes, mode: str) -> None:
    """The new version in place at once: written beside it, then renamed over it."""
    temp = f".berth-{os.getpid()}-{next(_temp_names)}.tmp"
    try:
        if mode == LINK:
            os.symlink(os.fsdecode(data), temp, dir_fd=fd)
        else:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
            out = os.open(temp, flags, 0o600, dir_fd=fd)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(out, view) :]
                os.fchmod(out, 0o755 if mode == EXEC else 0o644)
            finally:
                os.close(out)
        os.rename(temp, name, src_dir_fd=fd, dst_dir_fd=fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=fd)
        raise


def _prune(fds: list[int], parts: list[str]) -> None:
    """Folders a deletion left empty go, as in a Git checkout (never /workspace)."""
    for depth in range(len(parts) - 1, 0, -1):
        try:
            os.rmdir(parts[depth - 1], dir_fd=fds[depth - 1])
        except OSError:
            return


def apply_one(item: dict[str, Any]) -> None:
    """One file to its new version, or Refused (a conflict: nothing changed)."""
    parts = parts_of(item["path"])
    content = item.get("content")
    data = None if content is None else base64.b64decode(content, validate=True)
    mode = str(item.get("mode") or FILE)
    new_sha = None if data is None else blob_id(data)
    fds = open_folders(parts, create=data is not None)
    if fds is None:  # a deletion, and a folder on its path is missing: done already
        return
    try:
        name = parts[-1]
        now = current(fds[-1], name)
        if _holds(now, new_sha, mode):
            if data is not None and mode != LINK and now.get("mode") != mode:
                os.chmod(name, 0o755 if mode == EXEC else 0o644, dir_fd=fds[-1])
            return
        if not _holds(now, item.get("base"), item.get("base_mode")):
            raise Refused(_conflict_why(now))
        try:
            if data is None:
                os.unlink(name, dir_fd=fds[-1])
                _prune(fds, parts)
            else:
                _put(fds[-1], name, data, mode)
        except OSError as e:
            raise Refused(f"could not be written in the session ({e.strerror})") from None
    finally:
        close_all(fds)


def apply(request: dict[str, Any]) -> dict[str, Any]:
    applied, conflicts = [], []
    for item in request.get("files") or []:
        path = item.get("path") if isinstance(item, dict) else None
        try:
            apply_one(item)
            applied.append(path)
        except (BadPath, Refused) as e:
            conflicts.append({"path": path, "why": str(e)})
        except OSError as e:
            conflicts.append({"path": path, "why": f"could not be written ({e.strerror})"})
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            conflicts.append({"path": path, "why": f"not a valid file to apply ({e})"})
    return {"ok": True, "applied": applied, "conflicts": conflicts}


def manifest(request: dict[str, Any]) -> dict[str, Any]:
    """The entries of `dirs` ("" is /workspace), in order, from `start` ([index of a
    folder, last name given]) on; at most `max_entries`, and files hashed up to
    `max_hash_bytes` in one answer (`next` says where to go on). A file larger than
    `max_file_bytes` is listed without its id."""
    dirs = [str(d) for d in request.get("dirs") or []]
    start = request.get("start") or [0, None]
    max_entries = int(request.get("max_entries") or 1000)
    max_hash = int(request.get("max_hash_bytes") or 64 << 20)
    max_file = int(request.get("max_file_bytes") or 10 << 20)
    entries: list[dict[str, Any]] = []
    hashed = 0
    for index in range(int(start[0]), len(dirs)):
        folder = dirs[index]
        parts = parts_of(folder + "/x") if folder else ["x"]
        try:
            fds = open_folders(parts, create=False)
        except Refused:
            fds = None
        if fds is None:
            continue  # gone (or made a link) since it was listed: nothing in it
        try:
            names = sorted(os.listdir(fds[-1]))
            last = start[1] if index == int(start[0]) else None
            for name in names:
                if last is not None and name <= last:
                    continue
                if len(entries) >= max_entries or hashed >= max_hash:
                    return {"ok": True, "entries": entries, "next": [index, last]}
                entry = current(fds[-1], name, max_file)
                entry["path"] = f"{folder}/{name}" if folder else name
                hashed += (entry.get("size") or 0) if entry.get("sha") else 0
                entries.append(entry)
                last = name
        finally:
            close_all(fds)
    return {"ok": True, "entries": entries, "next": None}


def read(request: dict[str, Any]) -> dict[str, Any]:
    """Files' contents (a link's target), in order, until `max_bytes` are given (one
    file at least); `rest` are the paths left for another request."""
    paths = list(request.get("paths") or [])
    max_bytes = int(request.get("max_bytes") or 4 << 20)
    max_file = int(request.get("max_file_bytes") or 10 << 20)
    files: list[dict[str, Any]] = []
    given = 0
    for at, path in enumerate(paths):
        if files and given >= max_bytes:
            return {"ok": True, "files": files, "rest": paths[at:]}
        parts = parts_of(path)
        try:
            fds = open_folders(parts, create=False)
        except Refused:
            fds = None
        if fds is None:
            files.append({"path": path, "type": "absent"})
            continue
        try:
            files.append({"path": path, **_content(fds[-1], parts[-1], max_file)})
            given += files[-1].get("size") or 0
        finally:
            close_all(fds)
    return {"ok": True, "files": files, "rest": []}


def _content(fd: int, name: str, max_file: int) -> dict[str, Any]:
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return {"type": "absent"}
    if stat.S_ISLNK(st.st_mode):
        data = os.fsencode(os.readlink(name, dir_fd=fd))
        return {"type": "link", "size": len(data), "data": base64.b64encode(data).decode()}
    if not stat.S_ISREG(st.st_mode):
        return {"type": "dir" if stat.S_ISDIR(st.st_mode) else "other"}
    if st.st_size > max_file:
        return {"type": "file", "size": st.st_size, "too_large": True}
    try:
        file_fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
    except OSError:
        return {"type": "other"}
    try:
        st = os.fstat(file_fd)
        if not stat.S_ISREG(st.st_mode):
            return {"type": "other"}
        chunks, size = [], 0
        while size <= max_file and (block := os.read(file_fd, READ_BLOCK)):
            chunks.append(block)
            size += len(block)
    finally:
        os.close(file_fd)
    if size > max_file:
        return {"type": "file", "size": size, "too_large": True}
    data = b"".join(chunks)
    return {
        "type": "file",
        "mode": EXEC if st.st_mode & 0o100 else FILE,
        "size": size,
        "data": base64.b64encode(data).decode(),
    }
