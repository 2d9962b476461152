"""What each end of a run means, and what to do next."""

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
            "Nothing ran; make a commit with shorter paths and run that.",
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
