"""What survives each stop of a session, said precisely (docs/sessions.md, DESIGN.md
"Persistence, said precisely"). Every answer about a session carries it, and the page
shows the same words; tests check both halves against the engine."""

from typing import Any

from sessions.models import Session, SessionState

# The container holds these: kept while it runs, and through a freeze (a paused cgroup
# keeps its processes and memory), never past a stop.
CONTAINER_STATES = (SessionState.READY, SessionState.FREEZING, SessionState.FROZEN)
HOME_MB = 64  # the tmpfs at /home/sandbox (sandbox.docker)


def _days(seconds: int) -> str:
    if seconds % 86400 == 0:
        return f"{seconds // 86400} d"
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    return f"{seconds} s"


def statement(session: Session) -> dict[str, dict[str, Any]]:
    in_container = session.state in CONTAINER_STATES
    has_setup = bool(session.run and session.run.setup.get("command"))
    return {
        "commits": {
            "where": f"the workspace's Git repository (branch {session.ref})",
            "survives": "always: a commit from the session is a commit like any other",
            "kept_now": True,
        },
        "uncommitted_files": {
            "where": "/workspace, a volume of the session's own",
            "survives": "through freeze and stop, until the session is deleted "
            f"(by hand, or {_days(session.retention_s)} after it stops)",
            "kept_now": session.state != SessionState.DELETED,
        },
        "dependency_cache": {
            "where": "/deps, shared by every run and session with the same cache key, read-only",
            "survives": "until evicted; [setup] fills it again",
            "kept_now": has_setup,
        },
        "home_and_tmp": {
            "where": f"$HOME (/home/sandbox, a tmpfs of {HOME_MB} MiB) and /tmp: what you "
            "install there (pip install --user, npm -g with a prefix in $HOME)",
            "survives": "only while the session is ready or frozen; gone at a stop",
            "kept_now": in_container,
        },
        "processes_and_memory": {
            "where": "the running container (detached execs, servers, what they hold)",
            "survives": "only while the session is ready or frozen (a freeze pauses them); "
            "gone at a stop",
            "kept_now": in_container,
        },
    }
