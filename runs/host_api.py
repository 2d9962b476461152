"""The internal API's doors for a run's files (runner hosts, part 2; docs/hosts.md): what a
runner host's worker copies into a run's sandboxes, read from the workspace's Git store
here on the web host, which alone holds it. A host is shown only the runs placed on it,
while they wait to be prepared; any other run is no run to it (404)."""

from collections.abc import Iterator
from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseBase
from ninja import Router, Schema

from core.errors import BerthError, Conflict, NotFound
from core.streams import streamed
from logs import intake, logstore
from runs import caches, outputs_up
from runs.models import ACTIVE_STATES, Purpose, Run, RunState
from sandbox.hosts import Host
from workspaces.archive import (
    SMALL_TREE_BYTES,
    Size,
    entries_tar_stream,
    links_out,
    measure_commit,
    tree_tar_stream,
    tree_tarball,
)
from workspaces.gitstore import GitStore
from workspaces.paths import InvalidPath
from workspaces.store import open_store

router = Router(tags=["runs"])
TAR = "application/x-tar"


class SourceRefused(BerthError):
    """The commit cannot go into a sandbox (the run ends with this code)."""

    status = 422


def placed_run(request: HttpRequest, run_id: str) -> Run:
    host: Host = request.auth  # type: ignore[attr-defined]
    run = (
        Run.objects.select_related("workspace__team")
        .filter(
            public_id=run_id,
            runner_host=host.name,
            state__in=(RunState.QUEUED, RunState.PREPARING),
        )
        .first()
    )
    if run is None:
        raise NotFound(f"No run {run_id} is placed on host {host.name} waiting to be prepared.")
    return run


@router.get("/runs/{run_id}/source", response={200: None})
def source(request: HttpRequest, run_id: str) -> HttpResponseBase:
    """The run's commit as a tar (under app/ for a build). Measured first: a tree past
    the caps is refused `source_too_large`, a path no sandbox can hold `source_invalid`,
    before a byte is sent. A small tree comes in one piece with its length; a large one
    is streamed entry by entry, never held whole. Symlinks climbing out of the tree are
    left out, and the run's log says which."""
    run = placed_run(request, run_id)
    under = "app" if run.purpose == Purpose.BUILD else ""
    with open_store(run.workspace) as store:
        size = _measured(store, run)
        left_out = links_out(store, run.commit) if size.climb > 0 else []
        if left_out:
            logstore.note(run.public_id, _left_out_note(left_out))
        if size.bytes <= SMALL_TREE_BYTES:
            return HttpResponse(tree_tarball(store, run.commit, under=under), content_type=TAR)

    def tree() -> Iterator[bytes]:
        with open_store(run.workspace) as store:
            yield from tree_tar_stream(store, run.commit, under=under)

    return streamed(tree(), TAR)


@router.get("/runs/{run_id}/key-files", response={200: None})
def key_files(request: HttpRequest, run_id: str) -> HttpResponseBase:
    """Only the run's `cache_key` entries, as a tar, every time stamp fixed: all that its
    setup's /workspace holds (runs.caches). A folder entry may be large: measured as
    the source is, and streamed."""
    run = placed_run(request, run_id)
    with open_store(run.workspace) as store:
        _measured(store, run)

    def entries() -> Iterator[bytes]:
        with open_store(run.workspace) as store:
            yield from entries_tar_stream(store, caches.key_files(run), caches.KEY_FILES_MTIME)

    return streamed(entries(), TAR)


def _measured(store: GitStore, run: Run) -> Size:
    try:
        return measure_commit(store, run.commit)
    except InvalidPath as e:
        raise SourceRefused(e.message, code="source_invalid") from None
    except BerthError as e:
        raise SourceRefused(e.message, code="source_too_large") from None


def _left_out_note(paths: list[str]) -> str:
    shown = ", ".join(paths[:20]) + (f" and {len(paths) - 20} more" if len(paths) > 20 else "")
    return (
        f"[source] {len(paths)} symlink(s) left out of /workspace: their target climbs out "
        f"of the workspace, which no sandbox can hold: {shown}. Point them inside the "
        "workspace or at an absolute path in a new commit."
    )


def logged_run(request: HttpRequest, run_id: str) -> str:
    """A run placed on the asking host, in any state: its follower may still be storing
    what the engine kept after its end, and an ended preview's note goes in later."""
    host: Host = request.auth  # type: ignore[attr-defined]
    if not Run.objects.filter(public_id=run_id, runner_host=host.name).exists():
        raise NotFound(f"No run {run_id} is placed on host {host.name}.")
    return run_id


intake.add_doors(router, "runs", logged_run)


def ending_run(request: HttpRequest, run_id: str) -> Run:
    """A run placed on the asking host whose end is not written yet: its outputs are
    read once, before that."""
    host: Host = request.auth  # type: ignore[attr-defined]
    run = (
        Run.objects.select_related("workspace__team", "requested_by", "token")
        .filter(public_id=run_id, runner_host=host.name, state__in=ACTIVE_STATES)
        .first()
    )
    if run is None:
        raise NotFound(f"No run {run_id} placed on host {host.name} is ending.")
    return run


@router.post("/runs/{run_id}/workspace", response=dict[str, int])
def workspace_piece(request: HttpRequest, run_id: str, at: int) -> dict[str, int]:
    """A piece of the stopped run's /workspace as a tar, at offset `at` (0 starts over);
    409 `upload_moved` (with the size held) for one out of turn, 413
    `workspace_too_large` past the run's disk cap."""
    run = ending_run(request, run_id)
    try:
        return {"size": outputs_up.append(run, max(at, 0), request.body)}
    except outputs_up.Moved as moved:
        raise Conflict(
            f"{moved}: send from there.", {"size": moved.size}, code="upload_moved"
        ) from None


class Uploaded(Schema):
    size: int  # the tar's whole length, as sent


@router.post("/runs/{run_id}/outputs", response=dict[str, Any])
def read_workspace(request: HttpRequest, run_id: str, body: Uploaded) -> dict[str, Any]:
    """The uploaded /workspace read into the run's changes, artifacts and commit (the
    fields its end is written with); the upload is removed either way."""
    return outputs_up.read_spooled(ending_run(request, run_id), body.size)
