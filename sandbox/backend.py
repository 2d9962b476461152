"""The sandbox backend seam: everything that touches the container engine.

One implementation today, the docker SDK: `sandbox.docker` creates a Sandbox row's
container, `sandbox.containers` acts on one by name. The rest of Berth calls only what
this module exports.
"""

from sandbox.containers import (
    cpu_seconds,
    cpu_seconds_known,
    create_volume,
    engine_runtimes,
    existing,
    finalize_facts,
    get_workspace_archive,
    pause_sandbox,
    remove_image,
    remove_sandbox,
    sandbox_pid,
    signal_sandbox,
    status_now,
    volumes_labelled,
    workspace_host_path,
)
from sandbox.docker import (
    RUNTIMES,
    SandboxError,
    check_image,
    commit_image,
    create,
    egress_on,
    isolation,
    registered,
    remove_volume_if_unlabelled,
    workspace_mount,
)
from sandbox.usage import Usage, count, volume_bytes, volume_path, writable_layer_path

__all__ = [
    "RUNTIMES",
    "SandboxError",
    "Usage",
    "check_image",
    "commit_image",
    "count",
    "cpu_seconds",
    "cpu_seconds_known",
    "create",
    "create_volume",
    "egress_on",
    "engine_runtimes",
    "existing",
    "finalize_facts",
    "get_workspace_archive",
    "isolation",
    "pause_sandbox",
    "registered",
    "remove_image",
    "remove_sandbox",
    "remove_volume_if_unlabelled",
    "sandbox_pid",
    "signal_sandbox",
    "status_now",
    "volume_bytes",
    "volume_path",
    "volumes_labelled",
    "workspace_host_path",
    "workspace_mount",
    "writable_layer_path",
]
