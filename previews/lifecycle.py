"""A preview's moves that follow from its process and its workspace, not from anyone
asking: the runner agent's watcher finds it healthy or not (previews.watch), its run
ends, the branch it follows moves, an approval it ran under lapses. Called from the
watcher and from signal receivers (previews.apps); what a person or a deploy asks is
previews.actions.
"""

from typing import Any

from django.db import transaction
from django.utils import timezone

from accounts.access import Actor
from logs import anywhere
from previews.actions import SYSTEM, _announce, _end_process, restart_preview, stop_preview
from previews.models import LIVE_STATES, Preview, PreviewState
from previews.outcomes import describe, last_lines
from runs import lapses
from runs.models import Purpose, Run
from sandbox.placement import NoHostReady
from workspaces.models import Workspace
from workspaces.reviews import ContractHeld


def mark_ready(preview: Preview, status: int) -> bool:
    now = timezone.now()
    # No log line here: while the process runs, the agent's follower is the log's one
    # writer (logs.logstore). What happened is on the preview; its end is logged.
    moved = preview.move(
        PreviewState.READY,
        (PreviewState.STARTING,),
        ready_at=now,
        last_health_status=status,
        last_health_at=now,
    )
    if moved:
        _announce(preview)
    return moved


def fail_start(preview: Preview, reason: str, status: int | None = None, **facts: Any) -> None:
    """The process is alive but never became healthy: not_listening, health_failed, or
    listening_on_other_port (`ports`: where it listens instead)."""
    with transaction.atomic():
        if preview.move(
            PreviewState.FAILED,
            (PreviewState.STARTING,),
            reason=reason,
            message=describe(reason, preview, status=status, **facts),
            ended_at=timezone.now(),
        ):
            _end_process(preview, SYSTEM)
            _announce(preview)


def on_run_finished(sender: object, run: Run, **kwargs: object) -> None:
    """A preview's process ended: starting → failed, ready → crashed (a stopped or
    failed preview already says why; an old process of a restarted one is no news)."""
    preview = Preview.objects.select_related("run").filter(run=run).first()
    if preview is None:
        return
    if not preview.is_live:
        # Stopped or failed on purpose: the process is over, so its log may say why.
        anywhere.note(run.public_id, f"[preview] {preview.state}: {preview.message}")
        return
    if run.reason in ("setup_failed", "setup_oom"):
        reason = "setup_failed"
    elif run.reason in ("exit_zero", "exit_nonzero", "command_not_found", "oom"):
        reason = "process_exited"
    else:
        reason = run.reason  # engine_unavailable, image_missing, worker_lost, ...
    to = PreviewState.CRASHED if preview.state == PreviewState.READY else PreviewState.FAILED
    if preview.move(
        to,
        LIVE_STATES,
        reason=reason,
        exit_code=run.exit_code,
        message=describe(
            reason,
            preview,
            exit_code=run.exit_code,
            run_message=run.message,
            network_failure=run.network_failure,
            crashed=to == PreviewState.CRASHED,
            last_lines=last_lines(run),
        ),
        ended_at=timezone.now(),
    ):
        anywhere.note(run.public_id, f"[preview] {preview.state}: {preview.message}")
        _announce(preview)


def on_branch_moved(
    sender: object, workspace: Workspace, branch: str, sha: str, actor: Actor, **kwargs: object
) -> None:
    """Previews that follow `branch` restart on its new commit."""
    for preview in (
        Preview.objects.select_related("run", "workspace__team")
        .filter(workspace=workspace, follow=True, ref=branch, kind="preview", state__in=LIVE_STATES)
        .exclude(commit=sha)
    ):
        try:
            restart_preview(preview, actor, commit=sha)
        except ContractHeld as e:
            # The branch asks for a contract a person has not approved: the preview
            # stops, saying so, rather than keep serving a commit it no longer follows.
            stop_preview(preview, None, reason=e.code, run_message=e.message)
        except NoHostReady as e:
            # No host can start it now: it stops, saying so, as a held one does.
            stop_preview(preview, None, reason=e.code, run_message=e.message)


def on_contract_lapsed(
    sender: object, workspace: Workspace, review_ids: list[int], who: str, **_: object
) -> None:
    """A preview or a release under an approval that lapsed, and not admitted by today's
    approvals, stops (runs.lapses says why not kept). A session's preview follows its
    session. A release stopped here stays routed; deploys' restore starts it again only
    once today's approvals admit it (restart_preview)."""
    for run in lapses.unadmitted(workspace, review_ids, (Purpose.PREVIEW, Purpose.RELEASE)):
        preview = Preview.objects.select_related("workspace__team").filter(run=run).first()
        if preview is not None and preview.is_live:
            stop_preview(preview, None, reason=lapses.REASON, by=who)
