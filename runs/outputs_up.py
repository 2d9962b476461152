"""A stopped run's /workspace on the web host (HOSTS-MAP rows 4–5, docs/hosts.md): its
host's agent sends it up as a tar in pieces (runs.workspace_up), kept in a spool file
here, and `read_spooled` turns it into changes, artifacts and the `runs/<id>` commit
with the workspace's Git store, which only the web host holds.

The spool is bounded by the run's disk cap (what its volume could hold, with the tar's
own overhead): past it the upload is refused and the run ends with its changes marked
unread, never a half-read tree. A piece names the offset it goes at; the same piece
sent again is kept once, offset 0 starts over (an agent that restarted reads again)."""

import fcntl
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction

from accounts.access import Actor
from accounts.actions import record
from core.errors import BerthError
from runs import outputs, secrets
from runs.models import ACTIVE_STATES, Run
from workspaces import contract_writes
from workspaces.gitstore import Author
from workspaces.store import open_store

log = logging.getLogger("berth.runs")


class Moved(Exception):
    def __init__(self, size: int) -> None:
        super().__init__(f"the upload holds {size} bytes")
        self.size = size


def spool_path(run: Run) -> Path:
    return Path(settings.DATA_DIR) / "uploads" / "runs" / f"{run.public_id}.tar"


def most_bytes(run: Run) -> int:
    """What its volume can hold, with the tar's own share: a header and at most a block
    of padding for each of the files and folders it may make (SANDBOX_MAX_INODES)."""
    disk_mb = int(run.limits.get("disk_mb") or settings.RUN_MAX_DISK_MB)
    return disk_mb * (1 << 20) + settings.SANDBOX_MAX_INODES * 2 * 512 + 2 * 512


def append(run: Run, at: int, data: bytes) -> int:
    """`data` at offset `at` of the run's upload (0: a new upload). Its new size."""
    path = spool_path(run)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # being read (an agent that restarted sends it again)
            raise Moved(os.fstat(fd).st_size) from None
        size = os.fstat(fd).st_size
        if at + len(data) == size and data:
            return size  # sent again: its answer was lost
        if at < size:
            # Sent from an earlier place (0: a new upload; else a piece that was cut
            # short, by a daphne restart or a full disk): what follows it goes.
            os.ftruncate(fd, at)
            size = at
        if at != size:
            raise Moved(size)
        if size + len(data) > most_bytes(run):
            raise BerthError(
                f"The run's /workspace is larger than its disk cap allows "
                f"({most_bytes(run) >> 20} MB with the archive's overhead).",
                code="workspace_too_large",
                status=413,
            )
        os.lseek(fd, size, os.SEEK_SET)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        return size + len(data)
    finally:
        os.close(fd)


def discard(run: Run) -> None:
    spool_path(run).unlink(missing_ok=True)


def sweep() -> int:
    """Uploads whose run ended (its agent died between sending and asking for the read):
    removed with retention's round. How many."""
    folder = Path(settings.DATA_DIR) / "uploads" / "runs"
    if not folder.is_dir():
        return 0
    held = {p.stem: p for p in folder.glob("*.tar")}
    live = set(
        Run.objects.filter(public_id__in=list(held), state__in=ACTIVE_STATES).values_list(
            "public_id", flat=True
        )
    )
    for run_id in held.keys() - live:
        held[run_id].unlink(missing_ok=True)
    return len(held.keys() - live)


def _pieces(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            yield block


def read_spooled(run: Run, size: int) -> dict[str, Any]:
    """The run's outputs from its whole upload (`size` bytes, as its host sent them):
    changes, artifacts and, on `commit_changes`, the commit. A failure to read them is
    reported on the run, never allowed to keep it from ending."""
    path = spool_path(run)
    masker = secrets.Masker(secrets.open_sealed(run.secrets_sealed))
    fd = None
    try:
        fd = os.open(path, os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # one read, no piece meanwhile
        held = os.fstat(fd).st_size
        if held != size:
            raise OSError(f"the upload holds {held} bytes of {size}")
        with open_store(run.workspace) as store:
            out = outputs.read_outputs(store, run, masker, chunks=_pieces(path))
    except Exception as e:
        log.exception("run %s: reading /workspace failed", run.public_id)
        changes = outputs.empty_changes()
        changes["error"] = f"The run's files could not be read back ({type(e).__name__})."
        return {"changes": changes}
    finally:
        discard(run)
        if fd is not None:
            os.close(fd)
    sha = ""
    if out.tree:
        # The tree is in the repository's objects already: "commit these changes" can
        # make the commit later, from the run's page or the API.
        out.changes["tree"] = out.tree.decode()
    if run.commit_changes and out.tree:
        try:
            with open_store(run.workspace) as store:
                sha = commit_tree(store, run, out.tree, withheld=out.changes["withheld"])
        except Exception as e:
            # The changes and artifacts are still reported: only the commit is missing.
            log.exception("run %s: committing its changes failed", run.public_id)
            out.changes["commit_error"] = (
                f"The changes could not be committed ({type(e).__name__}); run again to retry."
            )
    return {
        "changes": out.changes,
        "artifacts": out.artifacts,
        "artifacts_refused": out.refused,
        "changes_commit": sha,
    }


def commit_tree(
    store: Any,
    run: Run,
    tree: bytes,
    actor: Actor | None = None,
    withheld: list[dict[str, Any]] | None = None,
) -> str:
    """The run's changes as one commit on a new branch `runs/<id>`, authored by the run
    on behalf of whoever asked for it (or `actor`, committing them afterwards). Files
    withheld for holding a secret's value are named in the message."""
    if withheld is None:
        withheld = (run.changes or {}).get("withheld") or []
    asked = (
        run.token.name
        if run.token
        else (run.requested_by.username if run.requested_by else "someone")
    )
    email = (run.requested_by.email if run.requested_by else "") or "runs@berth.invalid"
    first_line = run.command.strip().splitlines()[0][:72] if run.command.strip() else ""
    message = f"Changes from run {run.public_id}\n\n$ {first_line}"
    if withheld:
        message += (
            "\n\nWithheld (they hold a granted secret's value; left as they were):\n"
            + "\n".join(f"- {w['path']} ({', '.join(w['secrets'])})" for w in withheld)
        )
    with store.write_lock():
        sha = store.make_commit(
            tree, [run.commit], Author(f"run {run.public_id} (asked by {asked})", email), message
        )
        store.advance(run.changes_branch, None, sha)
    by = actor or (Actor(run.requested_by, run.token) if run.requested_by else None)
    if by is not None:
        # The run's command wrote these files; whoever asked for it brought them in.
        contract_writes.note(run.workspace, by, store, [sha], [run.commit])
        with transaction.atomic():
            record(
                run.workspace.team,
                by,
                "run.changes_committed",
                f"commit:{sha[:12]}",
                run.workspace.slug,
                run=run.public_id,
                branch=run.changes_branch,
            )
    return sha
