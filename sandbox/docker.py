"""Hardened containers for Sandbox rows, with the docker SDK (docs/security.md).

Everything a container gets follows from its row (sandbox.models.Sandbox): image,
runtime, limits, network, labels and name. What goes in it and when it starts is its
owner's business (runs.prepare). Source goes in with `put_archive` into the /workspace
volume of a created, not yet started container: with a read-only root, the only place
that works (docs/architecture.md, "Engine facts").
"""

import contextlib
from typing import Any

import docker
from django.conf import settings
from docker.types import LogConfig, Mount, Ulimit

from sandbox import hardening
from sandbox.containers import engine_runtimes
from sandbox.egress.policy import PROXY_PORT
from sandbox.engine import engine
from sandbox.images import EGRESS_WAIT, RUN_WRAPPER, SESSION_INIT
from sandbox.limits import within_bounds
from sandbox.models import Sandbox, SandboxKind

RUNTIMES = {"runc": "runc", "gvisor": "runsc"}
# Under gVisor the engine's pids cgroup also counts gVisor's own threads (the sentry's,
# and one a task: 56 here for a container running `sleep`, 69 behind the output
# wrapper), so the floor of 64 left a sandbox almost no processes of its own, and the
# sentry died (exit 2, nothing in the log) when it could not start a thread. The engine
# gets this many more than the sandbox's pids; what the sandbox's own tasks may reach
# stays about its pids.
GVISOR_PIDS_HEADROOM = 64

# An image's labels by its id (an id's labels never change): check_image has them in
# hand already, so create needs no second call to the engine.
_LABELS: dict[str, dict[str, str]] = {}


class SandboxError(Exception):
    """An expected failure with a reason its owner's outcomes describe."""

    def __init__(self, reason: str, **facts: object) -> None:
        super().__init__(reason)
        self.reason, self.facts = reason, facts


def registered(runtime: str) -> list[str]:
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


def in_app(sandbox: Sandbox) -> bool:
    """A release build and a release's process have their source in /app of their image
    and no /workspace."""
    return sandbox.workdir == "/app"


def _host_config(
    sandbox: Sandbox,
    runtime: str,
    mounts: list[Mount],
    cpu_shares: int | None,
    workspace: Mount | None,
) -> dict[str, Any]:
    """Every hardening setting of a sandbox. A release build alone has a writable root
    layer (what it leaves in /app becomes the release image)."""
    # Held to today's bounds once more: a row recorded before a bound existed must not
    # reach the engine with a limit that vanishes (0 nano-CPUs is no CPU limit at all).
    limits, _ = within_bounds(sandbox.limits)
    memory = f"{int(limits['memory_mb'])}m"
    app = in_app(sandbox)
    return dict(
        user="1000:1000",
        working_dir=sandbox.workdir,
        cap_drop=["ALL"],
        # Berth's seccomp profile, never the engine's default (hardening.py says why).
        security_opt=hardening.security_opt(runtime),
        read_only=sandbox.kind != SandboxKind.BUILD,
        network_mode="none",
        # A session's exec channel is its own init (it reaps orphans): then no process
        # in the sandbox but the non-dumpable channel holds the container's output,
        # which would otherwise let a command forge its frames through /proc/1/fd/1.
        init=sandbox.kind != SandboxKind.SESSION,
        ipc_mode="private",
        mem_limit=memory,
        memswap_limit=memory,  # no swap: past the limit is an OOM kill, not a crawl
        nano_cpus=int(float(limits["cpus"]) * 1e9),
        # The CPU weight under contention (its owner's quota); None: the default.
        **({"cpu_shares": cpu_shares} if cpu_shares else {}),
        pids_limit=int(limits["pids"]) + (GVISOR_PIDS_HEADROOM if runtime == "runsc" else 0),
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
        mounts=([] if app else [workspace or workspace_mount(sandbox)]) + mounts,
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


def workspace_mount(sandbox: Sandbox) -> Mount:
    """Its own /workspace: the volume named after it, made (labelled) by the engine at
    create if not there yet."""
    return Mount("/workspace", sandbox.name, type="volume", labels=sandbox.labels)


def check_image(
    image: str, exact_id: str = "", needs_egress_wait: bool = False, needs_session: bool = False
) -> str:
    """The image id to use: `exact_id` exactly when given (a replay), else the name's."""
    try:
        found = engine().images.get(exact_id or image)
    except docker.errors.ImageNotFound:
        if exact_id:
            raise SandboxError("image_gone", image=image, image_id=exact_id) from None
        raise SandboxError("image_missing", image=image) from None
    _LABELS[str(found.id)] = dict(found.labels or {})
    if needs_egress_wait and (found.labels or {}).get("berth.egress-wait") != EGRESS_WAIT:
        raise SandboxError("egress_unsupported_image", image=image)
    if needs_session and (found.labels or {}).get("berth.session") != SESSION_INIT:
        raise SandboxError("session_unsupported_image", image=image)
    return str(found.id)


def egress_on(sandbox: Sandbox) -> bool:
    return bool(sandbox.network.get("mode") == "proxy")


def _command(sandbox: Sandbox, command: str, framed: bool) -> list[str]:
    """`sh -c command`, behind the image's egress wrapper when it has a proxy (the
    command starts only once the proxy listens in its namespace, sandbox.egress), all
    behind its output wrapper when `framed`."""
    wrapped = ([EGRESS_WAIT] if egress_on(sandbox) else []) + ["sh", "-c", command]
    return [RUN_WRAPPER, *wrapped] if framed else wrapped


def frames_output(sandbox: Sandbox) -> bool:
    """Whether its command runs behind the image's output wrapper: every kind but a
    session (its exec channel frames its own output), in an image that has it."""
    if sandbox.kind == SandboxKind.SESSION:
        return False
    image = sandbox.image_id or sandbox.image
    labels = _LABELS.get(image)
    if labels is None:
        labels = dict(engine().images.get(image).labels or {})
        if image.startswith("sha256:"):
            _LABELS[image] = labels
    return labels.get("berth.run") == RUN_WRAPPER


def _proxy_env(sandbox: Sandbox) -> dict[str, str]:
    """What pip, npm, curl and git read to use a proxy (both spellings: tools differ)."""
    if not egress_on(sandbox):
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


def create(
    sandbox: Sandbox,
    command: str,
    env: dict[str, str],
    mounts: list[Mount] | None = None,
    cpu_shares: int | None = None,
    workspace: Mount | None = None,
) -> Any:
    """The sandbox's container, created (not started) as its row says."""
    runtime = RUNTIMES[sandbox.runtime]
    framed = frames_output(sandbox)
    if framed != sandbox.output_framed:
        sandbox.record_output_framed(framed)
    return engine().containers.create(
        sandbox.image,
        _command(sandbox, command, framed),
        name=sandbox.name,
        labels=sandbox.labels,
        environment={**env, **_proxy_env(sandbox)},
        **_host_config(sandbox, runtime, mounts or [], cpu_shares, workspace),
    )


def isolation(container: Any, runtime_args: list[str]) -> dict[str, Any]:
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


def commit_image(sandbox: Sandbox, image: str, labels: dict[str, str]) -> str:
    """The exited container's root layer as the image `image` (its tmpfs mounts are not
    in it, and a build has no volumes), labelled as given."""
    container = engine().containers.get(sandbox.name)
    repository, _, tag = image.rpartition(":")
    made = container.commit(
        repository=repository,
        tag=tag,
        conf={
            "Labels": {
                "berth.instance": settings.BERTH_INSTANCE,
                "berth.egress-wait": EGRESS_WAIT,
                "berth.run": RUN_WRAPPER,
                **labels,
            }
        },
    )
    return str(made.id)


def remove_volume_if_unlabelled(name: str) -> bool:
    """A volume of that name not made by this instance (the engine recreates a missing
    named volume empty and unlabelled at create) is removed; True if it was."""
    volume = engine().volumes.get(name)
    if (volume.attrs.get("Labels") or {}).get("berth.instance") != settings.BERTH_INSTANCE:
        with contextlib.suppress(docker.errors.APIError):
            volume.remove(force=True)
        return True
    return False
