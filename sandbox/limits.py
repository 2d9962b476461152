"""A run's limits: workspace.toml asks, the operator's bounds decide.

Every limit has a floor and a ceiling. A value in workspace.toml outside them is
clamped and the run says so in a warning (the file is the team's, and may predate a
lower maximum); a value in an API request outside them is refused with 422 naming the
bound (the caller can fix it now). The ceilings are the operator's maxima. The floors
are Berth's: below them a limit vanishes or the sandbox cannot start — a tiny `cpus`
rounds to 0 nano-CPUs, which the engine reads as no CPU limit at all; a pids or nofile
setting of 0 or -1 means unlimited; gVisor does not start in less than 64 MB.
"""

from typing import Any

from django.conf import settings

from core.errors import Invalid
from workspaces.config import Sandbox

FLOORS: dict[str, float] = {
    "cpus": 0.1,
    "memory_mb": 64,
    "disk_mb": 16,
    "timeout_s": 1,
    "pids": 64,
    "nofile": 256,
    "inodes": 1000,
}
# The limits only the operator sets have no maximum of their own: these bound the
# setting (past 1,048,576 open files the kernel refuses to start the container; files
# and folders are counted on the host, one walk per count).
FIXED_CEILINGS = {"pids": 65536, "nofile": 1048576, "inodes": 10_000_000}
ASKED = ("cpus", "memory_mb", "disk_mb", "timeout_s")  # workspace.toml or the request
# The operator's settings. inodes: files and folders a sandbox may hold on the engine's
# disk, counted by the runner agent (sandbox.diskwatch).
FIXED = {"pids": "RUN_PIDS_LIMIT", "nofile": "RUN_NOFILE", "inodes": "SANDBOX_MAX_INODES"}


def maxima() -> dict[str, float]:
    return {
        "cpus": settings.RUN_MAX_CPUS,
        "memory_mb": settings.RUN_MAX_MEMORY_MB,
        "disk_mb": settings.RUN_MAX_DISK_MB,
        "timeout_s": settings.RUN_MAX_TIMEOUT_S,
        **FIXED_CEILINGS,
    }


def bounds() -> dict[str, tuple[float, float]]:
    """(floor, ceiling) of each limit; a maximum set below its floor is the floor."""
    return {key: (floor, max(floor, maxima()[key])) for key, floor in FLOORS.items()}


def _whole(key: str, value: float) -> float:
    return value if key == "cpus" else int(value)


def _clamped(key: str, value: float, asked: str) -> tuple[float, str | None]:
    """(the value within bounds, a warning saying so if it was not)."""
    floor, ceiling = (_whole(key, b) for b in bounds()[key])
    if value > ceiling:
        return ceiling, f"{asked}; this server allows at most {ceiling}, so {ceiling} applies."
    if value < floor:
        return floor, f"{asked}; this server allows at least {floor}, so {floor} applies."
    return value, None


def effective_limits(
    sandbox: Sandbox, requested: dict[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """(limits, warnings) for a run; raises Invalid for a request outside the bounds."""
    limits: dict[str, Any] = {}
    warnings: list[str] = []
    for key in ASKED:
        floor, ceiling = bounds()[key]
        if requested.get(key) is not None:
            value = requested[key]
            if value > ceiling:
                raise Invalid(
                    f"{key} {value} is above this server's maximum of {ceiling}.",
                    {"field": key, "maximum": ceiling},
                    code="above_maximum",
                )
            if value < floor:
                raise Invalid(
                    f"{key} {value} is below this server's minimum of {floor}.",
                    {"field": key, "minimum": floor},
                    code="below_minimum",
                )
        else:
            value = getattr(sandbox, key)
            value, warning = _clamped(
                key, value, f"workspace.toml asks for [sandbox].{key} = {value}"
            )
            warnings += [warning] if warning else []
        limits[key] = value
    for key, setting in FIXED.items():
        value = getattr(settings, setting)
        limits[key], warning = _clamped(key, value, f"the setting {setting} is {value}")
        warnings += [warning] if warning else []
    limits["log_bytes"] = settings.RUN_LOG_MAX_BYTES
    return limits, warnings


def within_bounds(limits: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Recorded limits (a replay's, or a row made before a bound existed) held to
    today's bounds: (limits, warnings)."""
    held, warnings = dict(limits), []
    for key in FLOORS:
        if held.get(key) is not None:
            held[key], warning = _clamped(
                key, held[key], f"the recorded run asked for {key} = {held[key]}"
            )
            warnings += [warning] if warning else []
    return held, warnings
