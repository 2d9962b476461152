"""What the engine does to one container, by its name: signal it, read its exit, its
pid, its CPU time and its /workspace, remove it. Nothing here knows what the container
is for; sandbox.docker creates them.
"""

import contextlib
import os
import time
from typing import Any

import docker
from django.conf import settings

from sandbox.engine import engine

_runtimes: tuple[float, dict[str, list[str]]] = (0.0, {})
RUNTIMES_FRESH_S = 30.0


def engine_runtimes(fresh: bool = False) -> dict[str, list[str]]:
    """The runtimes the engine has registered, each with its runtimeArgs; asked at most
    every 30 s (an engine info call costs ~8 ms per run otherwise)."""
    global _runtimes
    if fresh or time.monotonic() - _runtimes[0] > RUNTIMES_FRESH_S:
        _runtimes = (
            time.monotonic(),
            {
                name: list((spec or {}).get("runtimeArgs") or [])
                for name, spec in (engine().info().get("Runtimes") or {}).items()
            },
        )
    return _runtimes[1]


def existing(name: str) -> Any:
    try:
        return engine().containers.get(name)
    except docker.errors.NotFound:
        return None


def status_now(name: str) -> str | None:
    """The container's status as the engine says it now (None if it is gone)."""
    container = existing(name)
    return None if container is None else str(container.status)


def create_volume(name: str, labels: dict[str, str]) -> None:
    engine().volumes.create(name, labels=labels)


def volumes_labelled(label: str) -> list[str]:
    """The names of this instance's volumes that carry `label` ("key=value")."""
    instance = f"berth.instance={settings.BERTH_INSTANCE}"
    found = engine().api.volumes(filters={"label": [instance, label]}).get("Volumes") or []
    return [v["Name"] for v in found]


def workspace_host_path(name: str) -> str | None:
    """The folder of a run's /workspace volume on this host, when the agent can read it
    (a local engine): reading it there costs a few ms, the engine's archive ~50."""
    try:
        root = engine().volumes.get(name).attrs.get("Mountpoint") or ""
    except docker.errors.NotFound:
        return None
    return root if os.path.isdir(root) else None


def get_workspace_archive(name: str) -> Any:
    """The /workspace folder of a stopped container as a stream of tar chunks."""
    chunks, _ = engine().containers.get(name).get_archive("/workspace", chunk_size=1 << 16)
    return chunks


def signal_sandbox(name: str, sig: str) -> bool:
    """Send a signal to the container's init; False if it is gone or not running."""
    try:
        engine().containers.get(name).kill(signal=sig)
    except (docker.errors.NotFound, docker.errors.APIError):
        return False
    return True


def pause_sandbox(name: str, paused: bool) -> bool:
    """`docker pause` (a cgroup freeze: processes and memory stay) or unpause; False if
    it is gone or already so (the engine's events say what it became)."""
    api = engine().api
    try:
        (api.pause if paused else api.unpause)(name)
    except (docker.errors.NotFound, docker.errors.APIError):
        return False
    return True


def finalize_facts(name: str) -> dict[str, Any] | None:
    """Exit code and OOM flag of a stopped container (and its id, whose late oom event
    sandbox.ooms may await), or None if it is gone."""
    container = existing(name)
    if container is None:
        return None
    state = container.attrs["State"]
    return {
        "id": container.id,
        "running": state.get("Running"),
        "exit_code": state.get("ExitCode"),
        "oom_killed": state.get("OOMKilled"),
        "status": state.get("Status"),
    }


def remove_sandbox(name: str) -> None:
    """Remove a run's container and its volume of the same name (if any); gone already
    is fine, and so is a removal someone else began (the engine answers 409: then its
    end is awaited, so the volume is no longer held). One engine call each, by name (no
    look-up first)."""
    api = engine().api
    try:
        api.remove_container(name, force=True)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as error:
        if error.status_code != 409 or "already in progress" not in str(error.explanation):
            raise
        _await_removal(name)
    with contextlib.suppress(docker.errors.NotFound):
        api.remove_volume(name, force=True)


def _await_removal(name: str, within_s: float = 30) -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            engine().api.inspect_container(name)
        except docker.errors.NotFound:
            return
        time.sleep(0.05)
    raise TimeoutError(f"container {name} was still being removed after {within_s:.0f} s")


def sandbox_pid(name: str) -> int | None:
    """The host pid of a running container's init (under runsc: of its sandbox), whose
    network namespace is the sandbox's; None if it is not running."""
    container = existing(name)
    if container is None or not container.attrs["State"].get("Running"):
        return None
    return int(container.attrs["State"].get("Pid") or 0) or None


# Where a container's CPU time is on this host, by container name: found once (one
# inspect), then read as a file. The engine's stats call reads the same counter, at the
# cost of an API round trip and a JSON document per sandbox per sample: most of what an
# idle agent did (issue 32). "" where no file was found: asked of the engine instead.
_CPU_FILES: dict[str, str] = {}
_CGROUP = "/sys/fs/cgroup"
_CPU_FILE_PATTERNS = (
    # cgroup v1 (cgroupfs driver, then systemd's): nanoseconds.
    "cpuacct/docker/{id}/cpuacct.usage",
    "cpu,cpuacct/docker/{id}/cpuacct.usage",
    "cpuacct/system.slice/docker-{id}.scope/cpuacct.usage",
    # cgroup v2: `usage_usec` in cpu.stat.
    "docker/{id}/cpu.stat",
    "system.slice/docker-{id}.scope/cpu.stat",
)


def _cpu_file(name: str) -> str | None:
    """The container's CPU counter file ("" if none), or None if it is gone."""
    known = _CPU_FILES.get(name)
    if known is not None:
        return known
    try:
        found = engine().api.inspect_container(name)
    except docker.errors.NotFound:
        return None
    if not found["State"].get("Running"):
        return None
    if len(_CPU_FILES) > 10_000:  # names of long-gone containers: forget them all
        _CPU_FILES.clear()
    # A parent of the operator's own: not guessed at, the engine is asked.
    parent = found["HostConfig"].get("CgroupParent")
    paths = [os.path.join(_CGROUP, p.format(id=found["Id"])) for p in _CPU_FILE_PATTERNS]
    _CPU_FILES[name] = "" if parent else next((p for p in paths if os.path.exists(p)), "")
    return _CPU_FILES[name]


def _read_cpu_file(path: str) -> float | None:
    try:
        with open(path) as f:
            text = f.read()
    except OSError:  # the cgroup went with the container
        return None
    if path.endswith("cpu.stat"):
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) / 1e6
        return None
    return int(text.strip() or 0) / 1e9


def cpu_seconds_known(name: str) -> float | None:
    """The container's CPU time if its counter file is already known (a file read, never
    an engine call); None otherwise. For checks run often on every sandbox (the disk
    watch's), which fall back to their full work when this says nothing."""
    path = _CPU_FILES.get(name)
    return _read_cpu_file(path) if path else None


def cpu_seconds(name: str) -> float | None:
    """CPU time the running container has used so far, from its cgroup's accounting;
    None when it is not running. The cgroup goes with the container, so this is read
    while it runs."""
    path = _cpu_file(name)
    if path is None:
        return None
    if path:
        used = _read_cpu_file(path)
        if used is None:
            _CPU_FILES.pop(name, None)  # gone, or made again under the same name
        return used or None
    try:
        stats = engine().api.stats(name, stream=False, one_shot=True)
    except docker.errors.NotFound:
        return None
    total = ((stats or {}).get("cpu_stats") or {}).get("cpu_usage", {}).get("total_usage")
    return total / 1e9 if total else None


def remove_image(name: str) -> None:
    with contextlib.suppress(docker.errors.ImageNotFound):
        engine().images.remove(name, force=True)
