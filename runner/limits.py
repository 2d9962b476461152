"""A run's limits: workspace.toml asks, the operator's maxima decide.

A value in workspace.toml above a maximum is clamped and the run says so in a warning
(the file is the team's, and may predate a lower maximum); a value in an API request
above a maximum is refused with 422 naming it (the caller can fix it now).
"""

from typing import Any

from django.conf import settings

from config.errors import Invalid
from workspaces.config import Sandbox


def maxima() -> dict[str, float]:
    return {"cpus": settings.RUN_MAX_CPUS, "memory_mb": settings.RUN_MAX_MEMORY_MB,
            "disk_mb": settings.RUN_MAX_DISK_MB, "timeout_s": settings.RUN_MAX_TIMEOUT_S}


def effective_limits(sandbox: Sandbox, requested: dict[str, Any]) -> tuple[dict[str, Any],
                                                                           list[str]]:
    """(limits, warnings) for a run; raises Invalid for a request past a maximum."""
    limits: dict[str, Any] = {}
    warnings: list[str] = []
    for key, maximum in maxima().items():
        if requested.get(key) is not None:
            value = requested[key]
            if value > maximum:
                raise Invalid(f"{key} {value} is above this server's maximum of {maximum}.",
                              {"field": key, "maximum": maximum}, code="above_maximum")
            if value <= 0:
                raise Invalid(f"{key} must be above 0.", {"field": key})
        else:
            value = getattr(sandbox, key)
            if value > maximum:
                warnings.append(f"workspace.toml asks for [sandbox].{key} = {value}; this "
                                f"server allows at most {maximum}, so {maximum} applies.")
                value = maximum
        limits[key] = value
    limits["pids"] = settings.RUN_PIDS_LIMIT
    limits["nofile"] = settings.RUN_NOFILE
    limits["log_bytes"] = settings.RUN_LOG_MAX_BYTES
    # Files and folders (inodes) a sandbox may hold on the engine's disk: recorded on
    # the run like its other limits, so a rerun and the agent apply what it was given.
    limits["inodes"] = settings.SANDBOX_MAX_INODES
    return limits, warnings
