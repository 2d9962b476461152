"""What each end of an exec, and each stop of a session, means; and what to do next."""

import signal
from typing import Any

EXIT_NOT_FOUND = 127

EXEC_ENDS: dict[str, str] = {
    "exit_zero": "The command exited with code 0.",
    "exit_nonzero": "The command exited with code {exit_code}; its output says why.",
    "command_not_found": (
        "The command was not found (exit 127): check its name, or install it in the "
        "session ($HOME keeps installs while the session is ready or frozen)."
    ),
    "timeout": (
        "The command ran longer than {timeout_s} s and was stopped; give a larger "
        "timeout_s, or start it with detach and read its output as it goes."
    ),
    "killed": "Killed on request.",
    "oom_killed": (
        "The command used more memory than the session's limit and was killed; raise "
        "[sandbox].memory_mb in workspace.toml and start the session again."
    ),
    "killed_by_signal": (
        "The command was ended by signal {signal} ({signal_name}), from inside the "
        "session (or the kernel: under gVisor an out-of-memory kill looks the same)."
    ),
    "session_stopped": (
        "The session stopped while the command ran ({why}); start the session again and "
        "run the command again."
    ),
    "not_started": (
        "The command could not be started in the session ({detail}); try again, and if "
        "it repeats, stop and start the session."
    ),
    "lost": ("The runner agent stopped before the command started, so it never ran; run it again."),
}


def describe_exec(reason: str, **facts: Any) -> str:
    filled = {"exit_code": None, "timeout_s": None, "signal": None, "why": "", "detail": ""}
    filled.update(facts)
    if filled["signal"]:
        try:
            filled["signal_name"] = signal.Signals(int(filled["signal"])).name
        except ValueError:
            filled["signal_name"] = "unknown"
    return EXEC_ENDS[reason].format(**filled)


def describe_end(end: dict[str, Any], timeout_s: int | None = None) -> tuple[str, str]:
    """(reason, message) of an end frame from the exec channel."""
    code, sig = end.get("exit_code"), end.get("signal")
    reason = end.get("reason") or ""
    if reason == "session_stopped":
        return reason, describe_exec(reason, why="it was asked to stop")
    if reason not in ("timeout", "killed", "oom_killed"):
        if code == 0:
            reason = "exit_zero"
        elif code == EXIT_NOT_FOUND:
            reason = "command_not_found"
        elif code is not None:
            reason = "exit_nonzero"
        else:
            reason = "killed_by_signal"
    return reason, describe_exec(reason, exit_code=code, signal=sig, timeout_s=timeout_s)


SESSION_ENDS: dict[str, str] = {
    "closed": "Stopped by {who}. Its files are kept until it is deleted; start it again.",
    "idle": (
        "Stopped after {idle_stop_s} s without activity. Its files are kept until it is "
        "deleted; start it again."
    ),
    "lifetime": (
        "Stopped at its maximum lifetime of {lifetime_s} s. Its files are kept until it "
        "is deleted; start it again."
    ),
    "contract_lapsed": (
        "Stopped by Berth: the approval of its sandbox contract lapsed ({who} narrowed or "
        "revoked it), and today's approved contract does not cover what it ran with. Its "
        "files are kept; start it again (a wider contract waits for a review)."
    ),
    "retention": "Its files were deleted {retention_s} s after it stopped (retention).",
    "deleted": "Deleted by {who}, with its uncommitted files.",
    "process_ended": ("Its process ended on its own ({run_reason}): {run_message} Start it again."),
    "start_failed": "It could not start ({run_reason}): {run_message}",
    "not_ready": (
        "Its exec channel did not answer within {deadline_s} s of its start; start it "
        "again, and if it repeats, check the session's log."
    ),
    "channel_unproven": (
        "Its exec channel could not prove the key Berth handed it at its start (the "
        "channel restarted without it, or another process answered on its port), so "
        "nothing more was sent into it. Its files are kept; start it again."
    ),
    "lost": (
        "Its container was stopped or removed from outside Berth (the engine restarted, "
        "or someone stopped it by hand): its processes and $HOME are gone, its files are "
        "kept; start it again."
    ),
}


class _Facts(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return "?"


def describe_session(reason: str, **facts: Any) -> str:
    return SESSION_ENDS[reason].format_map(_Facts(facts))
