"""Hardened run containers with the docker SDK (docs/security.md).

Source goes in with `put_archive` into the per-run volume of a created, not yet
started container: with a read-only root, the only place that works
(docs/architecture.md, "Engine facts").
"""

import concurrent.futures
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import docker
from django.conf import settings
from django.utils import timezone
from docker.types import LogConfig, Mount, Ulimit

from core.errors import BerthError
from runs import logstore
from runs.models import Purpose, Run
from sandbox import hardening
from sandbox.containers import engine_runtimes, existing, remove_sandbox
from sandbox.egress.policy import PROXY_PORT
from sandbox.engine import engine
from sandbox.images import EGRESS_WAIT
from sandbox.limits import within_bounds
from workspaces.archive import (
    SMALL_TREE_BYTES,
    entries_tar_stream,
    measure_commit,
    tree_tar_stream,
    tree_tarball,
)
from workspaces.paths import InvalidPath
from workspaces.store import open_store

RUNTIMES = {"runc": "runc", "gvisor": "runsc"}
# Engine calls a run's preparation makes side by side (each waits on the engine).
_BACKGROUND = concurrent.futures.ThreadPoolExecutor(8, thread_name_prefix="sandbox")


class SandboxError(Exception):
    """An expected failure with a reason from runs.outcomes."""

    def __init__(self, reason: str, **facts: object) -> None:
        super().__init__(reason)
        self.reason, self.facts = reason, facts


def _registered(runtime: str) -> list[str]:
    """The runtime's args, when it is registered in a way that enforces the sandbox's
    seccomp profile. A miss is asked again: only what was seen is trusted from the
    cache. Fails closed: never a fallback to runc, never a runsc that ignores seccomp."""
    for fresh in (False, True):
        runtimes = engine_runtimes(fresh=fresh)
        if runtime in runtimes and hardening.runtime_enforces_seccomp(runtime, runtimes[runtime]):
            return runtimes[runtime]
    if runtime not in runtimes:
        raise SandboxError("runtime_unavailable")
    raise SandboxError("seccomp_unavailable")


def _labels(run: Run, kind: str = "run", phase: str = "") -> dict[str, str]:
    labels = {
        "berth.instance": settings.BERTH_INSTANCE,
        "berth.kind": kind,
        "berth.owner": run.public_id,
    }
    if phase:
        labels["berth.phase"] = phase
    return labels


def _host_config(
    run: Run,
    runtime: str,
    deps: Mount | None = None,
    cpu_shares: int | None = None,
    workspace: Mount | None = None,
) -> dict[str, Any]:
    """Every hardening setting of a sandbox. A release build alone has a writable root
    layer (what it leaves in /app becomes the release image), and it and a release have
    no /workspace: their source is in /app of the image. /workspace is the run's volume
    unless another is given (the setup step's own)."""
    # Held to today's bounds once more: a row recorded before a bound existed must not
    # reach the engine with a limit that vanishes (0 nano-CPUs is no CPU limit at all).
    limits, _ = within_bounds(run.limits)
    memory = f"{int(limits['memory_mb'])}m"
    in_app = run.purpose in (Purpose.BUILD, Purpose.RELEASE)
    return dict(
        user="1000:1000",
        working_dir="/app" if in_app else "/workspace",
        cap_drop=["ALL"],
        # Berth's seccomp profile, never the engine's default (hardening.py says why).
        security_opt=hardening.security_opt(runtime),
        read_only=run.purpose != Purpose.BUILD,
        network_mode="none",
        init=True,
        ipc_mode="private",
        mem_limit=memory,
        memswap_limit=memory,  # no swap: past the limit is an OOM kill, not a crawl
        nano_cpus=int(float(limits["cpus"]) * 1e9),
        # The CPU weight under contention (runs.quotas.cpu_weight); None: the default.
        **({"cpu_shares": cpu_shares} if cpu_shares else {}),
        pids_limit=int(limits["pids"]),
        ulimits=[
            Ulimit(name="nofile", soft=int(limits["nofile"]), hard=int(limits["nofile"])),
            # No single file may be bigger than the whole disk allowance.
            Ulimit(
                name="fsize",
                soft=int(limits["disk_mb"]) * 1024 * 1024,
                hard=int(limits["disk_mb"]) * 1024 * 1024,
            ),
            Ulimit(name="core", soft=0, hard=0),
        ],
        tmpfs={
            "/tmp": "rw,noexec,nosuid,nodev,size=64m",  # noqa: S108 (the sandbox's own)
            "/home/sandbox": "rw,nosuid,nodev,size=64m,uid=1000,gid=1000,mode=0755",
        },
        mounts=(
            [] if in_app else [workspace or Mount("/workspace", run.container_name, type="volume")]
        )
        + ([deps] if deps else []),
        runtime=runtime,
        hostname="sandbox",
        # The agent copies output into the log store. The engine's copy must outlast
        # an agent restart and a lagging follower until the store's cap is reached
        # (a rotation before that would lose lines), yet not fill the disk on a flood.
        log_config=LogConfig(
            type="json-file",
            config={
                "max-size": f"{max(16, 4 * settings.RUN_LOG_MAX_BYTES // (1024 * 1024))}m",
                "max-file": "1",
            },
        ),
    )


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
        raise SandboxError("image_not_allowed", image=run.image)
    try:
        if run.rerun_of_id and run.image_id:
            image = engine().images.get(run.image_id)
        else:
            image = engine().images.get(run.image)
    except docker.errors.ImageNotFound:
        if run.rerun_of_id and run.image_id:
            raise SandboxError("image_gone", image=run.image, image_id=run.image_id) from None
        raise SandboxError("image_missing", image=run.image) from None
    if egress_on(run) and (image.labels or {}).get("berth.egress-wait") != EGRESS_WAIT:
        raise SandboxError("egress_unsupported_image", image=run.image)
    return str(image.id)


def egress_on(run: Run) -> bool:
    return bool(run.network.get("mode") == "proxy")


def _command(run: Run, command: str) -> list[str]:
    """`sh -c command`, behind the image's egress wrapper when the run has a proxy: the
    command starts only once the proxy listens in its namespace (sandbox.egress)."""
    return ([EGRESS_WAIT] if egress_on(run) else []) + ["sh", "-c", command]


def _proxy_env(run: Run) -> dict[str, str]:
    """What pip, npm, curl and git read to use a proxy (both spellings: tools differ)."""
    if not egress_on(run):
        return {}
    url = f"http://127.0.0.1:{PROXY_PORT}"
    env = {"BERTH_EGRESS_WAIT_S": str(settings.EGRESS_WAIT_S)}
    for name, value in (
        ("http_proxy", url),
        ("https_proxy", url),
        ("no_proxy", "localhost,127.0.0.1"),
    ):
        env[name] = env[name.upper()] = value
    return env


def prepare_and_start(
    run: Run,
    env: dict[str, str],
    still_wanted: Callable[[], bool] = lambda: True,
    first_delivery: bool = False,
) -> bool:
    """Create, hydrate and start the run's sandbox; True if it is running now.

    1. With a `[setup]` command, the dependency cache for its key is looked up: a hit
       is mounted read-only at /deps and setup is skipped; a miss creates a setup
       container first, with a fresh /deps volume it alone may write.
    2. The main container is created now too (it alone gets the env and secrets), so
       the agent only has to start it once setup has succeeded.
    3. The commit's tree goes into the shared /workspace volume; the first container
       is started.
    Safe to call twice for one run (a redelivered task): a started container is left
    to the agent, created-but-not-started ones are replaced. The first delivery (the
    one that moved the run out of `queued`) has nothing to find, and skips the look.
    """
    names = (run.setup_container_name, run.container_name)
    made = [] if first_delivery else [c for c in map(existing, names) if c is not None]
    if any(c.status != "created" for c in made):
        return True
    for container in made:
        remove_sandbox(container.name)
    in_app = run.purpose in (Purpose.BUILD, Purpose.RELEASE)
    # Read from Git while the engine works on the calls below.
    source = None if run.purpose == Purpose.RELEASE else _BACKGROUND.submit(_source, run)
    volume = None
    if not in_app:
        # The engine answers two calls at once: the volume is made while the image is
        # checked (a refused image's volume goes with the run's cleanup).
        volume = _BACKGROUND.submit(
            engine().volumes.create, run.container_name, labels=_labels(run)
        )
    try:
        image_id = _check_image(run)
        runtime = RUNTIMES[run.runtime]
        runtime_args = _registered(runtime)
        setup, deps = _deps(run, image_id)
        from runs.quotas import cpu_weight

        shares = cpu_weight(run)
    finally:
        if volume is not None:  # made before any cleanup after a refusal looks for it
            concurrent.futures.wait([volume])
    if volume is not None:
        volume.result()  # the engine's own error, if making it failed
    first = None
    if setup.get("hit") is False:
        # No env and no secrets, and a /workspace of its own holding only the key's
        # files: what setup leaves is shared by later runs of the key (on any branch),
        # so it must follow from the key alone, not from who asked or what else the
        # commit holds. The engine makes that volume, labelled, at create.
        first = engine().containers.create(
            run.image,
            _command(run, setup["command"]),
            name=run.setup_container_name,
            labels=_labels(run, phase="setup"),
            environment=_proxy_env(run),
            **_host_config(
                run,
                runtime,
                Mount("/deps", setup["volume"], type="volume"),
                shares,
                Mount("/workspace", run.setup_container_name, type="volume", labels=_labels(run)),
            ),
        )
    main = engine().containers.create(
        run.image,
        _command(run, run.command),
        name=run.container_name,
        labels=_labels(run, phase="main"),
        environment={**env, **_proxy_env(run)},
        **_host_config(run, runtime, deps, shares),
    )
    first = first or main
    # Checked while the source goes in.
    checked = _BACKGROUND.submit(_check_cache_volume, setup["volume"]) if setup.get("hit") else None
    # The commit is measured (refused past the caps) before anything is copied in.
    tree = source.result() if source is not None else None
    # Setup's own /workspace is filled while the run's is.
    key_files = _BACKGROUND.submit(_put_key_files, run, first) if first is not main else None
    # A build's source goes into the writable root layer, before start (the tree
    # becomes /app); a run's into the /workspace volume; a release's is in its image.
    try:
        if tree is not None and not main.put_archive("/" if in_app else "/workspace", tree):
            raise SandboxError("sandbox_failed", detail="the source could not be copied in")
    finally:
        # Never left writing into a container the cleanup is removing.
        if key_files is not None:
            concurrent.futures.wait([key_files])
    if key_files is not None:
        key_files.result()
    if checked is not None:
        checked.result()
    now = timezone.now()
    Run.objects.filter(pk=run.pk).update(
        image_id=image_id,
        hydrated_at=now,
        isolation=_isolation(main, runtime_args),
        setup=setup,
        phase="setup" if first is not main else "main",
        setup_done_at=now if setup.get("hit") else None,
    )
    if not still_wanted():
        # Cancelled, or carried to its end by another delivery of this task meanwhile.
        for name in names:
            remove_sandbox(name)
        return False
    if setup.get("command"):
        logstore.note(run.public_id, _setup_note(setup))
    first.start()
    return True


def _source(run: Run) -> bytes | Iterator[bytes]:
    """The commit's tree as a tar stream: under app/ for a build, else as it is.

    The tree is measured first: an older commit past the caps (made before them, or by
    hand in the store) ends the run `source_too_large` before anything is copied. A
    small tree is built here at once (while the engine works on the other calls); a
    large one is streamed into the engine entry by entry, never held whole."""
    under = "app" if run.purpose == Purpose.BUILD else ""
    with open_store(run.workspace) as store:
        try:
            size = measure_commit(store, run.commit)
        except InvalidPath as e:
            raise SandboxError("source_invalid", detail=e.message) from None
        except BerthError as e:
            raise SandboxError("source_too_large", detail=e.message) from None
        if size.bytes <= SMALL_TREE_BYTES:
            return tree_tarball(store, run.commit, under=under)

    def stream() -> Iterator[bytes]:
        with open_store(run.workspace) as store:
            yield from tree_tar_stream(store, run.commit, under=under)

    return stream()


def _put_key_files(run: Run, container: Any) -> None:
    """Only the `cache_key` entries into the setup container's /workspace."""
    from runs import caches

    with open_store(run.workspace) as store:
        tar = entries_tar_stream(store, caches.key_entries(store, run), caches.KEY_FILES_MTIME)
        if not container.put_archive("/workspace", tar):
            raise SandboxError("sandbox_failed", detail="the key files could not be copied in")


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
    volume = engine().volumes.get(name)
    if (volume.attrs.get("Labels") or {}).get("berth.instance") != settings.BERTH_INSTANCE:
        with contextlib.suppress(docker.errors.APIError):
            volume.remove(force=True)
        raise SandboxError(
            "sandbox_failed", detail="its dependency cache was dropped while the run started"
        )


def _deps(run: Run, image_id: str) -> tuple[dict[str, Any], Mount | None]:
    """(the run's setup record, the read-only /deps mount of the main container)."""
    from runs import caches

    if not run.setup.get("command"):
        return run.setup, None
    setup = {**run.setup, "key": caches.cache_key(run, image_id)}
    cache = caches.find_ready(run, setup["key"])
    if cache is not None:
        setup.update(hit=True, volume=cache.volume, cache=cache.public_id)
    else:
        setup.update(hit=False, volume=run.deps_volume_name, cache=None)
        if not caches.volume_exists(run.deps_volume_name):
            engine().volumes.create(
                run.deps_volume_name,
                labels={**_labels(run, kind="deps"), "berth.workspace": run.workspace.public_id},
            )
    return setup, Mount("/deps", setup["volume"], type="volume", read_only=True)


def start_main(run: Run) -> bool:
    """Start the main container created by `prepare_and_start` (after setup); False if
    it is gone. A second call for a started container is harmless."""
    container = existing(run.container_name)
    if container is None:
        return False
    if container.status == "created":
        container.start()
    return True


def _isolation(container: Any, runtime_args: list[str]) -> dict[str, Any]:
    """What actually applied, read back from the engine rather than from our request
    (docker-py's create already inspected the new container: no second round trip).
    The seccomp profile counts as applied only if the runtime, as the engine registered
    it, enforces it."""
    host = container.attrs["HostConfig"]
    options = host.get("SecurityOpt") or []
    return {
        "runtime": host.get("Runtime"),
        "user": container.attrs["Config"].get("User"),
        "cap_drop": host.get("CapDrop"),
        "cap_add": host.get("CapAdd") or [],
        "privileged": host.get("Privileged"),
        "security_opt": hardening.shown_security_opt(options),
        "seccomp": hardening.seccomp_record(options, host.get("Runtime") or "runc", runtime_args),
        "read_only_root": host.get("ReadonlyRootfs"),
        "network": host.get("NetworkMode"),
        "memory_bytes": host.get("Memory"),
        "nano_cpus": host.get("NanoCpus"),
        "cpu_shares": host.get("CpuShares") or 1024,
        "pids_limit": host.get("PidsLimit"),
        "ulimits": {u["Name"]: u["Hard"] for u in host.get("Ulimits") or []},
        "mounts": [
            {"target": m.get("Target"), "type": m.get("Type")} for m in host.get("Mounts") or []
        ]
        + [{"target": t, "type": "tmpfs"} for t in host.get("Tmpfs") or {}],
        "init": host.get("Init"),
    }


def remove_run(run: Run) -> None:
    """Everything a run created: both containers, the /workspace volume, and the /deps
    volume it filled unless that became the cache for its key."""
    from runs import caches

    remove_sandbox(run.setup_container_name)
    remove_sandbox(run.container_name)
    if caches.volume_exists(run.deps_volume_name) and not caches.is_cache(run.deps_volume_name):
        caches.remove_volume(run.deps_volume_name)


def commit_release_image(run: Run) -> str:
    """The exited build container's root layer as the release image `run.output_image`
    (its tmpfs mounts are not in it, and it has no volumes). Labelled with what went in,
    so the image itself says which commit and which build it holds."""
    container = engine().containers.get(run.container_name)
    repository, _, tag = run.output_image.rpartition(":")
    image = container.commit(
        repository=repository,
        tag=tag,
        conf={
            "Labels": {
                "berth.instance": settings.BERTH_INSTANCE,
                "berth.kind": "release",
                "berth.workspace": run.workspace.public_id,
                "berth.commit": run.commit,
                "berth.build": run.public_id,
                "berth.egress-wait": EGRESS_WAIT,
                **{f"berth.{k}": str(v) for k, v in run.output_labels.items()},
            }
        },
    )
    return str(image.id)
