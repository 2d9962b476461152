"""A run's sandboxes: made from its inputs, filled with its source, started.

The run owns up to two Sandbox rows (sandbox.models): its setup step's, when the
dependency cache for its key is a miss, and its main one (the command, a service, or a
release build), which `Run.sandbox` points to. The sandbox layer makes each container
as its row says; what goes in and when it starts is decided here.
"""

import concurrent.futures
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import docker
from django.conf import settings
from django.utils import timezone
from docker.types import Mount

from logs import shipped
from runs import caches
from runs.models import OWNER, Purpose, Run
from runs.quotas import cpu_weight
from sandbox import actions as sandboxes
from sandbox import backend, webapi
from sandbox.models import LIVE_STATES, Sandbox, SandboxKind, this_host

KINDS = {
    Purpose.RUN: SandboxKind.RUN,
    Purpose.PREVIEW: SandboxKind.SERVICE,
    Purpose.RELEASE: SandboxKind.SERVICE,
    Purpose.BUILD: SandboxKind.BUILD,
    Purpose.SESSION: SandboxKind.SESSION,
}
# Engine calls a run's preparation makes side by side (each waits on the engine).
_BACKGROUND = concurrent.futures.ThreadPoolExecutor(8, thread_name_prefix="sandbox")


def image_allowed(image: str, run: Run | None = None) -> bool:
    """The operator's list; and a release image only for a release process of its own
    workspace (another team's built source is never a base for anything)."""
    if image in settings.ALLOWED_IMAGES:
        return True
    return (
        run is not None
        and run.purpose == Purpose.RELEASE
        and image.startswith(f"berth-{settings.BERTH_INSTANCE}-release-{run.workspace.public_id}:")
    )


def _check_image(run: Run) -> str:
    """The image id the run uses: a replay's recorded id exactly, else the name's."""
    if not image_allowed(run.image, run):
        raise backend.SandboxError("image_not_allowed", image=run.image)
    exact = run.image_id if run.rerun_of_id and run.image_id else ""
    return backend.check_image(
        run.image, exact, run.network.get("mode") == "proxy", run.purpose == Purpose.SESSION
    )


def _sandbox(run: Run, kind: str, image_id: str = "", volumes: list[str] | None = None) -> Sandbox:
    return sandboxes.provide(
        OWNER,
        run.public_id,
        kind,
        team_id=run.workspace.team_id,
        image=run.image,
        image_id=image_id,
        runtime=run.runtime,
        workdir="/app" if run.purpose in (Purpose.BUILD, Purpose.RELEASE) else "/workspace",
        limits=run.limits,
        network=run.network,
        volumes=volumes or [],
    )


def sandboxes_of(run: Run) -> list[Sandbox]:
    return sandboxes.of_owner(OWNER, run.public_id)


def prepare_and_start(
    run: Run,
    env: dict[str, str],
    still_wanted: Callable[[], bool] = lambda: True,
    first_delivery: bool = False,
) -> bool:
    """Create, hydrate and start the run's sandboxes; True if one is running now.

    1. With a `[setup]` command, the dependency cache for its key is looked up: a hit
       is mounted read-only at /deps and setup is skipped; a miss creates a setup
       sandbox first, with a fresh /deps volume it alone may write.
    2. The main container is created now too (it alone gets the env and secrets), so
       the agent only has to start it once setup has succeeded.
    3. The commit's tree goes into the main /workspace volume; the first container
       is started.
    Safe to call twice for one run (a redelivered task): a started container is left
    to the agent, created-but-not-started ones are replaced. The first delivery (the
    one that moved the run out of `queued`) has nothing to find, and skips the look.
    """
    made_before = [] if first_delivery else sandboxes_of(run)
    found = [c for c in (backend.existing(s.name) for s in made_before) if c is not None]
    if any(c.status != "created" for c in found):
        return True
    for container in found:
        backend.remove_sandbox(container.name)
    in_app = run.purpose in (Purpose.BUILD, Purpose.RELEASE)
    # A kept /workspace (a session's) is counted by the disk watch as its own would be.
    main = _sandbox(
        run,
        KINDS[Purpose(run.purpose)],
        volumes=[run.workspace_volume] if run.workspace_volume else [],
    )
    run.attach_sandbox(main)
    volume = None
    kept = _kept_volume(run) if run.workspace_volume else None
    # Fetched from the web host while the engine works on the calls below; a release's
    # source is in its image, and a session's files are in its volume after its first
    # start.
    wanted = run.purpose != Purpose.RELEASE and not (kept is not None and kept.existed)
    source = _BACKGROUND.submit(_source, run) if wanted else None
    if kept is None and not in_app:
        # The engine answers two calls at once: the volume is made while the image is
        # checked (a refused image's volume goes with the run's cleanup).
        volume = _BACKGROUND.submit(backend.create_volume, main.name, labels=main.labels)
    try:
        image_id = _check_image(run)
        runtime_args = backend.registered(backend.RUNTIMES[run.runtime])
        setup, deps = _deps(run, image_id)
        shares = cpu_weight(run)
    finally:
        if volume is not None:  # made before any cleanup after a refusal looks for it
            concurrent.futures.wait([volume])
    if volume is not None:
        volume.result()  # the engine's own error, if making it failed
    first_box = None
    first = None
    if setup.get("hit") is False:
        # No env and no secrets, and a /workspace of its own holding only the key's
        # files: what setup leaves is shared by later runs of the key (on any branch),
        # so it must follow from the key alone, not from who asked or what else the
        # commit holds. The engine makes that volume, labelled, at create.
        first_box = _sandbox(run, SandboxKind.SETUP, image_id, volumes=[main.name, setup["volume"]])
        first = backend.create(
            first_box,
            setup["command"],
            {},
            [Mount("/deps", setup["volume"], type="volume")],
            shares,
        )
    main.record_image(image_id)
    container = backend.create(
        main, run.command, env, [deps] if deps else [], shares, kept.mount if kept else None
    )
    first = first or container
    # Checked while the source goes in.
    checked = _BACKGROUND.submit(_check_cache_volume, setup["volume"]) if setup.get("hit") else None
    # The commit is measured (refused past the caps) before anything is copied in.
    tree = source.result() if source is not None else None
    # Setup's own /workspace is filled while the run's is.
    key_files = _BACKGROUND.submit(_put_key_files, run, first) if first is not container else None
    # A build's source goes into the writable root layer, before start (the tree
    # becomes /app); a run's into the /workspace volume; a release's is in its image.
    try:
        if tree is not None and not _put_source(container, "/" if in_app else "/workspace", tree):
            raise backend.SandboxError("sandbox_failed", detail="the source could not be copied in")
    finally:
        # Never left writing into a container the cleanup is removing.
        if key_files is not None:
            concurrent.futures.wait([key_files])
    if key_files is not None:
        key_files.result()
    if checked is not None:
        checked.result()
    # The wall clock covers setup and command alike, from hydration.
    if not run.is_service:
        sandboxes.set_deadline(
            OWNER, run.public_id, timezone.now() + timedelta(seconds=run.timeout_s)
        )
    run.record_hydrated(
        image_id, backend.isolation(container, runtime_args), setup, first is not container
    )
    if not still_wanted():
        # Cancelled, or carried to its end by another delivery of this task meanwhile.
        for box in sandboxes_of(run):
            sandboxes.remove(box)
        return False
    if setup.get("command"):
        shipped.note(shipped.run_log(run.public_id), _setup_note(setup))
    first.start()
    return True


class _Kept:
    def __init__(self, mount: Mount, existed: bool) -> None:
        self.mount, self.existed = mount, existed


def _kept_volume(run: Run) -> _Kept:
    """The run's kept /workspace volume (a session's), made now if it is not there."""
    name = run.workspace_volume
    # Filled once: by the first start that got as far as its process (a redelivered
    # task of that first start fills it again, which writes the same tree).
    filled = (
        Run.objects.filter(workspace_volume=name, process_started_at__isnull=False)
        .exclude(pk=run.pk)
        .exists()
    )
    there = caches.volume_exists(name)
    # A filled volume gone since (removed by hand) is filled again from the commit.
    filled = filled and there
    if not there:
        backend.create_volume(
            name,
            labels={
                "berth.instance": settings.BERTH_INSTANCE,
                "berth.kind": "session",
                "berth.workspace": run.workspace.public_id,
            },
        )
    return _Kept(Mount("/workspace", name, type="volume"), filled)


def _source(run: Run) -> bytes | Iterator[bytes]:
    """The commit's tree as a tar, from the web host (runs.host_api.source), which
    measures it first: past the caps it ends the run `source_too_large`, a path no
    sandbox holds `source_invalid`, before anything is copied. A large tree is
    streamed into the engine as it arrives, never held whole."""
    return _from_web(f"/runs/{run.public_id}/source")


def _from_web(path: str) -> bytes | Iterator[bytes]:
    try:
        return webapi.client().download(path)
    except webapi.WebRefused as e:
        if e.code in ("source_too_large", "source_invalid"):
            raise backend.SandboxError(e.code, detail=e.message) from None
        raise backend.SandboxError("sandbox_failed", detail=str(e)) from None
    except webapi.WebUnavailable as e:
        raise backend.SandboxError("web_unavailable", detail=str(e)) from None


def _put_source(container: Any, path: str, tar: Any) -> bool:
    """put_archive, where a refusal of the archive itself (the engine could not unpack
    it: an entry it will not hold) is the source's fault, named as the engine named it,
    never the engine's (`engine_unavailable`)."""
    try:
        return bool(container.put_archive(path, tar))
    except webapi.WebUnavailable as e:  # a stream from the web host broken off
        raise backend.SandboxError("web_unavailable", detail=str(e)) from None
    except docker.errors.APIError as e:
        explanation = str(e.explanation or "")
        if "Error processing tar file" not in explanation:
            raise
        detail = explanation.split("):", 1)[-1].strip() or explanation
        raise backend.SandboxError(
            "source_invalid", detail=f"the engine refused an entry: {detail}."
        ) from None


def _put_key_files(run: Run, container: Any) -> None:
    """Only the `cache_key` entries into the setup container's /workspace."""
    if not _put_source(container, "/workspace", _from_web(f"/runs/{run.public_id}/key-files")):
        raise backend.SandboxError("sandbox_failed", detail="the key files could not be copied in")


def _setup_note(setup: dict[str, Any]) -> str:
    key = setup["key"][:12]
    if setup.get("hit"):
        return (
            f"[setup] skipped: the dependency cache for key {key} is filled; /deps is "
            "mounted read-only"
        )
    return f"[setup] no cache for key {key} yet; running: {setup['command']}"


def _check_cache_volume(name: str) -> None:
    """A cache dropped between lookup and create would have been recreated empty by the
    engine (an unlabelled volume of the same name): never run on that."""
    if backend.remove_volume_if_unlabelled(name):
        raise backend.SandboxError(
            "sandbox_failed", detail="its dependency cache was dropped while the run started"
        )


def _deps(run: Run, image_id: str) -> tuple[dict[str, Any], Mount | None]:
    """(the run's setup record, the read-only /deps mount of the main container)."""
    if not run.setup.get("command"):
        return run.setup, None
    setup = {**run.setup, "key": caches.cache_key(run, image_id)}
    cache = caches.find_ready(run, setup["key"])
    if cache is not None:
        setup.update(hit=True, volume=cache.volume, cache=cache.public_id)
    else:
        setup.update(hit=False, volume=run.deps_volume_name, cache=None)
        if not caches.volume_exists(run.deps_volume_name):
            backend.create_volume(
                run.deps_volume_name,
                labels={
                    "berth.instance": settings.BERTH_INSTANCE,
                    "berth.kind": "deps",
                    "berth.owner": run.public_id,
                    "berth.workspace": run.workspace.public_id,
                },
            )
    return setup, Mount("/deps", setup["volume"], type="volume", read_only=True)


def start_main(run: Run) -> bool:
    """Start the main container created by `prepare_and_start` (after setup); False if
    it is gone. A second call for a started container is harmless."""
    if run.sandbox is None:
        return False
    container = backend.existing(run.sandbox.name)
    if container is None:
        return False
    if container.status == "created":
        container.start()
    return True


def remove_run(run: Run) -> None:
    """Everything a run created: its sandboxes with their /workspace volumes, and the
    /deps volume it filled unless that became the cache for its key."""
    for box in sandboxes_of(run):
        sandboxes.remove(box)
    if caches.volume_exists(run.deps_volume_name) and not caches.is_cache(run.deps_volume_name):
        caches.remove_volume(run.deps_volume_name)


def remove_workspace_sandboxes(workspace: Any, **_: Any) -> None:
    """Before a workspace is deleted (workspaces.signals.workspace_deleting): every live
    sandbox of its runs goes, container then volume, whatever its state (a `created`
    one no agent would ever start). A prepare still under way finds its run gone and
    removes what it made; one that started meanwhile is the reconcile's (owner gone),
    and the agent's sweeps take a volume left behind. This host's alone: another
    host's are on its engine, and its agent's reconcile removes them (owner gone)."""
    run_ids = list(Run.objects.filter(workspace=workspace).values_list("public_id", flat=True))
    for box in Sandbox.objects.filter(
        host=this_host(), owner_kind=OWNER, owner_id__in=run_ids, state__in=LIVE_STATES
    ).order_by("pk"):
        sandboxes.remove(box)
    # Then the volumes its runs made besides /workspace, free now that no container
    # mounts them: /deps (caches too: their rows go with the workspace), a session's.
    for name in backend.volumes_labelled(f"berth.workspace={workspace.public_id}"):
        caches.remove_volume(name)


def commit_release_image(run: Run) -> str:
    """The exited build's root layer as the release image `run.output_image`, labelled
    with what went in, so the image itself says which commit and build it holds."""
    assert run.sandbox is not None
    return backend.commit_image(
        run.sandbox,
        run.output_image,
        {
            "berth.kind": "release",
            "berth.workspace": run.workspace.public_id,
            "berth.commit": run.commit,
            "berth.build": run.public_id,
            **{f"berth.{k}": str(v) for k, v in run.output_labels.items()},
        },
    )
