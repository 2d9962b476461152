"""What the runner agent does when a run's container exits (sync, on a worker thread).

`end_setup` decides whether a finished setup step lets the command start; `end_run`
reads the outputs and writes the one terminal state. Both are safe to call again after
an agent restart: every step checks what is already done.
"""

import logging
import time
from typing import Any

from django.conf import settings
from django.utils import timezone

from logs import shipped
from runs import caches, network_failure, outputs, workspace_up
from runs.models import Purpose, Run
from runs.outcomes import (
    EXIT_EGRESS_WAIT,
    EXIT_NOT_FOUND,
    describe,
    how_to_allow,
    network_message,
)
from runs.prepare import commit_release_image, start_main
from runs.workspace_up import volume_tar
from sandbox import backend, diskwatch, webapi
from sandbox.models import Sandbox

log = logging.getLogger("berth.runner_agent")


def _exit_reason(run: Run, facts: dict[str, Any] | None, sandbox: Sandbox | None = None) -> str:
    exit_code = facts.get("exit_code") if facts else None
    if facts is None:
        return "worker_lost"
    # The first stop asked of the sandbox (a timeout, the disk watch, a cancel), else
    # one asked of the run before its sandbox was made.
    if sandbox is not None and sandbox.stop_reason:
        return sandbox.stop_reason
    if run.stop_reason:
        return run.stop_reason
    if facts.get("oom_killed"):
        return "oom"
    if exit_code == 0:
        return "exit_zero"
    if exit_code == EXIT_NOT_FOUND:
        return "command_not_found"
    if (
        exit_code == EXIT_EGRESS_WAIT
        and run.network.get("mode") == "proxy"
        and run.egress_offered_at is None
    ):
        return "egress_unavailable"
    return "exit_nonzero"


def end_setup(sandbox: Sandbox, facts: dict[str, Any] | None, disk_note: str | None = None) -> bool:
    """After the setup container exits: True if the main container was started (the
    run goes on), False if the run ended here (its end is written)."""
    run_id = sandbox.owner_id
    run = Run.objects.select_related("workspace", "sandbox").filter(public_id=run_id).first()
    if run is None or not run.is_active:
        return False
    if run.phase == "main":
        return True  # done before an agent restart; only the cleanup was left
    if _exit_reason(run, facts, sandbox) == "exit_zero":
        # What it leaves becomes a cache other runs mount: counted once more, in case
        # it wrote past its caps and exited between two counts of the watch.
        found = diskwatch.verdict(diskwatch.count_sandbox(sandbox)[1], sandbox)
        if found is not None:
            sandbox.request_stop(found[0])
            disk_note = found[1]
    run.refresh_from_db()
    sandbox.refresh_from_db()
    if _exit_reason(run, facts, sandbox) != "exit_zero":
        # The command never ran: no outputs.
        end_run(run_id, facts, read_outputs=False, sandbox=sandbox, disk_note=disk_note)
        return False
    size = backend.volume_bytes(run.deps_volume_name) or 0
    cache = caches.keep_filled(run, size)
    now = timezone.now()
    took = (now - run.hydrated_at).total_seconds() if run.hydrated_at else 0
    shipped.note(
        shipped.run_log(run_id),
        f"[setup] done in {took:.1f} s; /deps ({size / 1e6:.1f} MB) is "
        "cached for later runs and read-only from now on; running the command",
    )
    run.enter_command({**run.setup, "cache": cache.public_id, "size_bytes": size})
    return start_main(run)  # False if gone: the reconcile marks the run lost


def early_outputs(run_id: str) -> dict[str, Any] | None:
    """A stopped run's changes and artifacts, read while its log still drains (its files
    are final once its container died), for `end_run`. None where that has nothing to
    read, or where reading has a lasting effect (a commit of the changes): those are
    read by `end_run` itself, once the end is certain."""
    run = (
        Run.objects.select_related("workspace__team", "requested_by", "token", "sandbox")
        .filter(public_id=run_id)
        .first()
    )
    if run is None or not run.is_active or run.purpose != Purpose.RUN or run.commit_changes:
        return None
    return _outputs(run)


def end_run(
    run_id: str,
    facts: dict[str, Any] | None,
    log_bytes: int | None = None,
    read_outputs: bool = True,
    outputs: dict[str, Any] | None = None,
    sandbox: Sandbox | None = None,
    disk_note: str | None = None,
) -> None:
    """Write the one terminal state of a run whose container exited, with its outputs
    (`outputs`: as `early_outputs` read them already; `disk_note`: the line the disk
    watch has for the log of a run it stopped)."""
    run = (
        Run.objects.select_related("workspace__team", "requested_by", "token", "sandbox")
        .filter(public_id=run_id)
        .first()
    )
    if run is None or not run.is_active:
        return
    reason = _exit_reason(run, facts, sandbox)
    if run.phase == "setup" and reason in ("oom", "exit_nonzero", "command_not_found"):
        reason = "setup_oom" if reason == "oom" else "setup_failed"
    if run.purpose == Purpose.BUILD and reason == "exit_zero" and facts is not None:
        # A build can write past its caps and exit between two counts of the watch:
        # its layer is counted once more, as it would become the image, before that.
        found = diskwatch.verdict(diskwatch.count_sandbox(sandbox)[1], sandbox) if sandbox else None
        if found is not None:
            reason = found[0]
            shipped.note(shipped.run_log(run_id), found[1])
    elif reason in ("disk_quota_exceeded", "inode_quota_exceeded") and disk_note:
        shipped.note(shipped.run_log(run_id), disk_note)
    exit_code = facts.get("exit_code") if facts else None
    state, message = describe(
        reason,
        exit_code=exit_code,
        who=(sandbox.stop_requested_by if sandbox else "") or run.stop_requested_by or "a user",
        **{"inodes": settings.SANDBOX_MAX_INODES, **run.limits},
    )
    fields: dict[str, Any] = {"log_entries": shipped.count(shipped.run_log(run_id))}
    if reason in ("exit_nonzero", "setup_failed"):
        # Read once the whole log is stored: "Fix [setup]" is the wrong advice for a
        # step that only needed a host it was not allowed to reach.
        offline = network_failure.find(run)
        if offline is not None:
            offline["how_to_allow"] = how_to_allow(offline)
            fields["network_failure"] = offline
            message = network_message(reason, exit_code, offline)
    if log_bytes is not None:
        fields["log_bytes"] = log_bytes
    if read_outputs and facts is not None and run.purpose == Purpose.RUN:
        fields.update(outputs if outputs is not None else _outputs(run))
    if run.purpose == Purpose.BUILD and reason == "exit_zero" and facts is not None:
        # Committed before the end is written: whoever follows the build's end (the
        # deploy) finds the image there. The container is removed only after this.
        try:
            started = time.monotonic()
            commit_release_image(run)
            shipped.note(
                shipped.run_log(run_id),
                f"[build] image committed as {run.output_image} in "
                f"{time.monotonic() - started:.2f} s",
            )
        except Exception as e:
            log.exception("run %s: committing the release image failed", run_id)
            reason, exit_code = "image_commit_failed", None
            state, message = describe(reason, error=type(e).__name__)
    if run.finish(state, reason, message, exit_code, **fields):
        log.info("run %s ended: %s (%s)", run_id, state, reason)


def _outputs(run: Run) -> dict[str, Any]:
    """Changes and artifacts of a stopped run; a failure to read them is reported on the
    run, never allowed to keep it from ending."""
    if run.sandbox is not None and run.sandbox.stop_reason == "inode_quota_exceeded":
        # Stopped for holding too many files: reading them all back would cost the
        # agent more than the run, and could never become a commit anyway.
        changes = outputs.empty_changes()
        changes["error"] = (
            "The run's files were not read back: it was stopped for making "
            "too many files and folders."
        )
        return {"changes": changes}
    try:
        root = backend.workspace_host_path(run.container_name)
        stream = volume_tar(root) if root else backend.get_workspace_archive(run.container_name)
        return workspace_up.send(run.public_id, stream)
    except webapi.WebRefused as e:  # past its disk cap, or ended meanwhile: said as it is
        changes = outputs.empty_changes()
        changes["error"] = f"The run's files could not be read back: {e.message}"
        return {"changes": changes}
    except Exception as e:
        # The web host reads them (runs.outputs_up): what fails here is sending them.
        log.exception("run %s: sending /workspace to the web host failed", run.public_id)
        changes = outputs.empty_changes()
        changes["error"] = f"The run's files could not be read back ({type(e).__name__})."
        return {"changes": changes}
