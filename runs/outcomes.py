"""What each end of a run means, and what to do next."""

from typing import Any

from runs.models import RunState

EXIT_NOT_FOUND = 127
EXIT_EGRESS_WAIT = 125  # the image's egress wrapper gave up waiting for the proxy


def describe(reason: str, **facts: object) -> tuple[str, str]:
    """(state, message) for a terminal `reason`; `facts` fill in the numbers."""
    f = facts
    table: dict[str, tuple[str, str]] = {
        "exit_zero": (RunState.SUCCEEDED, "The command exited with code 0."),
        "exit_nonzero": (
            RunState.FAILED,
            f"The command exited with code {f.get('exit_code')}; the log says why.",
        ),
        "command_not_found": (
            RunState.FAILED,
            "The command was not found (exit 127): check its name, or "
            "install it in the [setup] command of workspace.toml.",
        ),
        "timeout": (
            RunState.TIMED_OUT,
            f"The command ran longer than {f.get('timeout_s')} s and was stopped; "
            "raise [sandbox].timeout_s or make it faster.",
        ),
        "oom": (
            RunState.OOM_KILLED,
            f"The command used more than {f.get('memory_mb')} MB of memory and was "
            "killed; raise [sandbox].memory_mb or use less memory.",
        ),
        "disk_quota_exceeded": (
            RunState.FAILED,
            f"The run wrote more than {f.get('disk_mb')} MB (in "
            "/workspace, in /deps during [setup], or in a release "
            "build's /app) and was stopped; raise [sandbox].disk_mb or "
            "write less. The log says what was counted.",
        ),
        "inode_quota_exceeded": (
            RunState.FAILED,
            f"The run made more than {f.get('inodes', 0):,} files and "
            "folders (in /workspace, in /deps during [setup], or in a "
            "release build's /app), or they could not be counted "
            "safely, and it was stopped; make fewer files (delete "
            "temporary ones, pack many small files into an archive) or "
            "ask your operator to raise SANDBOX_MAX_INODES. The log "
            "says what was counted.",
        ),
        "cancelled_by_user": (RunState.CANCELLED, f"Cancelled by {f.get('who', 'a user')}."),
        "service_stopped": (
            RunState.CANCELLED,
            f"Stopped with its preview ({f.get('who', 'a user')}).",
        ),
        "contract_lapsed": (
            RunState.CANCELLED,
            "Stopped: the approval of its sandbox contract lapsed "
            f"({f.get('who', 'a reviewer')} narrowed or revoked it). Ask again: a "
            "contract wider than today's approved one waits for a review.",
        ),
        "session_stopped": (
            RunState.CANCELLED,
            f"Stopped with its session ({f.get('who', 'a user')}).",
        ),
        "source_too_large": (
            RunState.FAILED,
            f"The commit's files were not copied in: {f.get('detail')} "
            "Nothing ran; make a commit without them and run that.",
        ),
        "source_invalid": (
            RunState.FAILED,
            f"The commit's files were not copied in: {f.get('detail')} "
            "Nothing ran; fix that in a new commit and run it.",
        ),
        "image_missing": (
            RunState.ERROR,
            f"The image {f.get('image')} is not on this Docker host; run `make "
            "run` (it builds the sandbox image) or pull the image.",
        ),
        "image_not_allowed": (
            RunState.ERROR,
            f"The image {f.get('image')} is not on the operator's allowed "
            "list (ALLOWED_IMAGES); use an allowed image.",
        ),
        "runtime_unavailable": (
            RunState.ERROR,
            "gVisor (runsc) is not registered with this Docker engine, and "
            "Berth never falls back to runc; run `scripts/host-setup "
            'docker` or ask for runtime "runc".',
        ),
        "seccomp_unavailable": (
            RunState.ERROR,
            "gVisor (runsc) is registered with this Docker engine without "
            "--oci-seccomp, so it would ignore the sandbox's seccomp "
            "profile, and Berth refuses to run without it; run "
            "`scripts/host-setup docker` (it registers runsc again and "
            'reloads the engine) or ask for runtime "runc".',
        ),
        "engine_unavailable": (
            RunState.ERROR,
            "The Docker engine did not answer; check that dockerd runs "
            "(`scripts/host-setup docker`) and run again.",
        ),
        "web_unavailable": (
            RunState.ERROR,
            "Its host could not fetch the run's files from the web host (BERTH_WEB_URL "
            f"on the runner host): {f.get('detail')} Check that the web host serves "
            "and that the runner host reaches it, then run again.",
        ),
        "sandbox_failed": (
            RunState.ERROR,
            f"The sandbox could not be prepared: {f.get('detail')}. Run again; "
            "if it persists, tell your operator.",
        ),
        "image_gone": (
            RunState.ERROR,
            f"The image this run recorded ({f.get('image_id')}) no longer "
            "exists, so it cannot be replayed exactly; start a new run, which "
            f"uses the current {f.get('image')}.",
        ),
        "setup_failed": (
            RunState.FAILED,
            f"The [setup] command exited with code {f.get('exit_code')} and "
            "the command did not run; the log says why. Fix [setup] in "
            "workspace.toml (nothing was cached).",
        ),
        "setup_oom": (
            RunState.OOM_KILLED,
            f"The [setup] command used more than {f.get('memory_mb')} MB of "
            "memory and was killed; raise [sandbox].memory_mb.",
        ),
        "egress_unsupported_image": (
            RunState.ERROR,
            f"The image {f.get('image')} has no Berth egress "
            "wrapper (label berth.egress-wait), so it cannot use "
            "[network] egress; use the sandbox image "
            "(SANDBOX_IMAGE) or remove [network] egress.",
        ),
        "session_unsupported_image": (
            RunState.ERROR,
            f"The image {f.get('image')} has no Berth exec channel (label berth.session), "
            "so it cannot hold a session; use the sandbox image (SANDBOX_IMAGE) in "
            "[sandbox] image, or run commands as runs.",
        ),
        "egress_unavailable": (
            RunState.ERROR,
            "The egress proxy was not offered in time, so the command did "
            "not start; check that the runner agent runs (`manage.py "
            "runner_agent`) and run again.",
        ),
        "image_commit_failed": (
            RunState.ERROR,
            "The build succeeded but its container could not be "
            f"committed to an image ({f.get('error')}); check the "
            "engine's disk space and ask for the deploy again.",
        ),
        "worker_lost": (
            RunState.LOST,
            "The sandbox disappeared while the run was active (the engine "
            "restarted or the container was removed); run it again.",
        ),
    }
    return table[reason]


REFUSED_WORDS = {
    "not_allowed": "it is not on the run's egress list",
    "address_not_allowed": "its address is private, loopback or link-local, which only "
    "the operator can allow (EGRESS_ALLOWED_ADDRESSES)",
    "resolve_failed": "the name did not resolve from Berth's host",
    "connect_failed": "it did not answer from Berth's host",
}


def how_to_allow(failure: dict[str, Any]) -> str:
    """What lets a network failure's destinations through (runs.network_failure.find)."""
    dests = failure["destinations"]
    entries = ", ".join(f'"{d["entry"]}"' for d in dests) or "the host it needs"
    outside = [d["entry"] for d in dests if not d["in_ceiling"]]
    if not dests:
        ceiling = (
            " The team's egress ceiling must allow it too: a team admin sets it on the "
            "team's members page."
        )
    elif outside:
        one = len(outside) == 1
        ceiling = (
            f" {', '.join(outside)} {'is' if one else 'are'} outside the team's egress "
            f"ceiling: a team admin must first add {'it' if one else 'them'} there (the "
            "team's members page)."
        )
    else:
        ceiling = (
            " The team's egress ceiling, which a team admin sets on the team's members "
            "page, bounds that list."
        )
    return f"To allow it, add {entries} to [network] egress in workspace.toml.{ceiling}"


def network_message(reason: str, exit_code: int | None, failure: dict[str, Any]) -> str:
    """The message of a command or [setup] step that failed on the network: what
    showed it, and how to allow the destination."""
    if reason == "setup_failed":
        head = f"The [setup] command exited with code {exit_code} and the command did not run"
        tail = " Nothing was cached."
    else:
        head, tail = f"The command exited with code {exit_code}", ""
    if failure["kind"] == "egress_denied":
        refused = "; ".join(
            f"{d['host']}{':' + str(d['port']) if d['port'] else ''} "
            f"({REFUSED_WORDS.get(d['refused'], d['refused'])})"
            for d in failure["destinations"]
            if d["refused"]
        )
        said = (
            f": Berth's egress proxy refused {refused}."
            if refused
            else f": Berth's egress proxy refused it (the log says “{failure['evidence']}”)."
        )
    elif failure["kind"] == "unreachable":
        said = (
            f": it could not reach the network (the log says “{failure['evidence']}”). "
            "This sandbox reaches the hosts listed in [network] egress only through "
            "Berth's proxy (HTTP_PROXY and HTTPS_PROXY, 127.0.0.1:3128): make the tool "
            "use it, and list the host."
        )
    else:
        said = (
            f": it tried to reach the network, and this sandbox had no network (the log "
            f"says “{failure['evidence']}”). A sandbox reaches only the hosts its "
            "workspace lists in [network] egress, through Berth's proxy."
        )
    return f"{head}{said} {failure['how_to_allow']}{tail}"
