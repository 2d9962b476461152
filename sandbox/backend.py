"""The sandbox backend seam: everything that touches the container engine for a run.

One implementation today, the docker SDK: `sandbox.docker` creates and starts a run's
containers, `sandbox.containers` acts on one by name. The rest of Berth calls only what
this module exports.
"""

from sandbox.containers import (
    cpu_seconds,
    engine_runtimes,
    finalize_facts,
    get_workspace_archive,
    remove_image,
    remove_sandbox,
    sandbox_pid,
    signal_sandbox,
    workspace_host_path,
)
from sandbox.docker import (
    SandboxError,
    commit_release_image,
    image_allowed,
    prepare_and_start,
    remove_run,
    start_main,
)
from sandbox.usage import Usage, count, volume_bytes, volume_path, writable_layer_path

__all__ = [
    "SandboxError",
    "Usage",
    "commit_release_image",
    "count",
    "cpu_seconds",
    "engine_runtimes",
    "finalize_facts",
    "get_workspace_archive",
    "image_allowed",
    "prepare_and_start",
    "remove_image",
    "remove_run",
    "remove_sandbox",
    "sandbox_pid",
    "signal_sandbox",
    "start_main",
    "volume_bytes",
    "volume_path",
    "workspace_host_path",
    "writable_layer_path",
]
