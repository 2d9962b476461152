"""Hardened run containers with the docker SDK (DESIGN.md, "Sandbox hardening").

Source goes in with `put_archive` into the per-run volume of a created, not yet
started container (VERIFIED.md: the only place that works with a read-only root).
"""

import contextlib
import os
from collections.abc import Callable
from typing import Any

import docker
from django.conf import settings
from django.utils import timezone
from docker.types import LogConfig, Mount, Ulimit

from runner.engine import engine
from runner.models import Run
from workspaces.archive import tree_tarball
from workspaces.store import open_store

RUNTIMES = {"runc": "runc", "gvisor": "runsc"}


class SandboxError(Exception):
    """An expected failure with a reason from runner.outcomes."""

    def __init__(self, reason: str, **facts: object) -> None:
        super().__init__(reason)
        self.reason, self.facts = reason, facts


def engine_runtimes() -> set[str]:
    return set(engine().info().get("Runtimes", {}))


def _labels(run: Run) -> dict[str, str]:
    return {"berth.instance": settings.BERTH_INSTANCE, "berth.kind": "run",
            "berth.owner": run.public_id}


def _host_config(run: Run, runtime: str) -> dict[str, Any]:
    limits = run.limits
    memory = f"{int(limits['memory_mb'])}m"
    return dict(
        user="1000:1000",
        working_dir="/workspace",
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        read_only=True,
        network_mode="none",
        init=True,
        ipc_mode="private",
        mem_limit=memory,
        memswap_limit=memory,  # no swap: past the limit is an OOM kill, not a crawl
        nano_cpus=int(float(limits["cpus"]) * 1e9),
        pids_limit=int(limits["pids"]),
        ulimits=[Ulimit(name="nofile", soft=int(limits["nofile"]), hard=int(limits["nofile"])),
                 # No single file may be bigger than the whole disk allowance.
                 Ulimit(name="fsize", soft=int(limits["disk_mb"]) * 1024 * 1024,
                        hard=int(limits["disk_mb"]) * 1024 * 1024),
                 Ulimit(name="core", soft=0, hard=0)],
        tmpfs={"/tmp": "rw,noexec,nosuid,nodev,size=64m",  # noqa: S108 (the sandbox's own)
               "/home/sandbox": "rw,nosuid,nodev,size=64m,uid=1000,gid=1000,mode=0755"},
        mounts=[Mount("/workspace", run.container_name, type="volume")],
        runtime=runtime,
        hostname="sandbox",
        # The agent copies output into the log store. The engine's copy must outlast
        # an agent restart and a lagging follower until the store's cap is reached
        # (a rotation before that would lose lines), yet not fill the disk on a flood.
        log_config=LogConfig(type="json-file", config={
            "max-size": f"{max(16, 4 * settings.RUN_LOG_MAX_BYTES // (1024 * 1024))}m",
            "max-file": "1"}),
    )


def _check_image(run: Run) -> str:
    if run.image not in settings.ALLOWED_IMAGES:
        raise SandboxError("image_not_allowed", image=run.image)
    try:
        return str(engine().images.get(run.image).id)
    except docker.errors.ImageNotFound:
        raise SandboxError("image_missing", image=run.image) from None


def _existing(name: str) -> Any:
    try:
        return engine().containers.get(name)
    except docker.errors.NotFound:
        return None


def prepare_and_start(run: Run, env: dict[str, str],
                      still_wanted: Callable[[], bool] = lambda: True) -> bool:
    """Create, hydrate and start the run's sandbox; True if it is running now.

    Safe to call twice for one run (a redelivered task): a started container is left
    to the agent, a created-but-not-started one is replaced.
    """
    existing = _existing(run.container_name)
    if existing is not None:
        if existing.status != "created":
            return True
        remove_sandbox(run.container_name)
    image_id = _check_image(run)
    runtime = RUNTIMES[run.runtime]
    if runtime not in engine_runtimes():
        raise SandboxError("runtime_unavailable")  # fail closed: never fall back to runc
    engine().volumes.create(run.container_name, labels=_labels(run))
    container = engine().containers.create(
        run.image, ["sh", "-c", run.command], name=run.container_name, labels=_labels(run),
        environment=env, **_host_config(run, runtime))
    with open_store(run.workspace) as store:
        tarball = tree_tarball(store, run.commit)
    if not container.put_archive("/workspace", tarball):
        raise SandboxError("sandbox_failed", detail="the source could not be copied in")
    Run.objects.filter(pk=run.pk).update(image_id=image_id, hydrated_at=timezone.now(),
                                         isolation=_isolation(container, run))
    if not still_wanted():
        # Cancelled, or carried to its end by another delivery of this task meanwhile.
        remove_sandbox(run.container_name)
        return False
    container.start()
    return True


def _isolation(container: Any, run: Run) -> dict[str, Any]:
    """What actually applied, read back from the engine rather than from our request
    (docker-py's create already inspected the new container: no second round trip)."""
    host = container.attrs["HostConfig"]
    return {
        "runtime": host.get("Runtime"),
        "user": container.attrs["Config"].get("User"),
        "cap_drop": host.get("CapDrop"),
        "cap_add": host.get("CapAdd") or [],
        "privileged": host.get("Privileged"),
        "security_opt": host.get("SecurityOpt"),
        "seccomp": "default" if not any("seccomp" in o for o in host.get("SecurityOpt") or [])
        else "custom",
        "read_only_root": host.get("ReadonlyRootfs"),
        "network": host.get("NetworkMode"),
        "memory_bytes": host.get("Memory"),
        "nano_cpus": host.get("NanoCpus"),
        "pids_limit": host.get("PidsLimit"),
        "ulimits": {u["Name"]: u["Hard"] for u in host.get("Ulimits") or []},
        "mounts": [{"target": m.get("Target"), "type": m.get("Type")}
                   for m in host.get("Mounts") or []] + [
                   {"target": t, "type": "tmpfs"} for t in host.get("Tmpfs") or {}],
        "init": host.get("Init"),
    }


def signal_sandbox(name: str, sig: str) -> bool:
    """Send a signal to the container's init; False if it is gone or not running."""
    try:
        engine().containers.get(name).kill(signal=sig)
    except (docker.errors.NotFound, docker.errors.APIError):
        return False
    return True


def finalize_facts(name: str) -> dict[str, Any] | None:
    """Exit code and OOM flag of a stopped container, or None if it is gone."""
    container = _existing(name)
    if container is None:
        return None
    state = container.attrs["State"]
    return {"running": state.get("Running"), "exit_code": state.get("ExitCode"),
            "oom_killed": state.get("OOMKilled"), "status": state.get("Status")}


def remove_sandbox(name: str) -> None:
    """Remove a run's container and volume; gone already is fine."""
    for remove in (lambda: engine().containers.get(name).remove(force=True),
                   lambda: engine().volumes.get(name).remove(force=True)):
        with contextlib.suppress(docker.errors.NotFound):
            remove()


def volume_bytes(name: str) -> int | None:
    """Bytes used under a run's volume, counted on the host without following links."""
    try:
        root = engine().volumes.get(name).attrs["Mountpoint"]
    except docker.errors.NotFound:
        return None
    total, stack = 0, [root]
    while stack:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    else:
                        total += entry.stat(follow_symlinks=False).st_blocks * 512
        except OSError:
            continue  # a file removed while we counted
    return total

