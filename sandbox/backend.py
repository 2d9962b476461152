"""The sandbox backend seam: everything that touches the container engine for a run.

One implementation today (`sandbox.docker`, the docker SDK); the rest of Berth
calls only what this package exports.
"""

from sandbox.docker import (
    SandboxError,
    commit_release_image,
    cpu_seconds,
    engine_runtimes,
    finalize_facts,
    get_workspace_archive,
    image_allowed,
    prepare_and_start,
    remove_image,
    remove_run,
    remove_sandbox,
    sandbox_pid,
    signal_sandbox,
    start_main,
    workspace_host_path,
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
