"""Every state change of previews: each writes Activity and sends work after commit.

A preview's process is a Run of purpose "preview" (runs.services.start_service):
starting one is queueing that run; the runner agent carries it, health-checks it
(previews.watch) and ends it; `on_run_finished` moves the preview on from its run's end.
"""

import logging
import secrets
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from accounts.access import Actor
from accounts.actions import record
from accounts.models import Team
from core import fanout
from core.errors import Conflict, Invalid, QuotaExceeded
from logs import logstore
from previews import gate
from previews.models import (
    LIVE_STATES,
    Preview,
    PreviewState,
    PreviewTicket,
    preview_changed,
)
from previews.outcomes import describe, last_lines
from runs import actions as runner_actions
from runs import lapses, services
from runs.models import Purpose, Run
from runs.quotas import Limits
from sessions.models import Session
from workspaces.models import ContractReview, Workspace
from workspaces.reviews import ContractHeld
from workspaces.store import open_store

SYSTEM = "Berth"


def start_preview(
    workspace: Workspace,
    actor: Actor,
    ref: str | None = None,
    follow: bool = False,
    idle_timeout_s: int | None = None,
) -> Preview:
    """Start the app of a commit: the ref is resolved now (the preview is pinned to that
    SHA) and `[preview]` of its workspace.toml says what runs and where it listens."""
    ref = ref or workspace.default_branch
    with open_store(workspace) as store:
        commit = store.resolve(ref)
        if follow and ref not in store.branches():
            raise Invalid(
                f"`follow` needs a branch to follow, and {ref!r} is not one.", {"field": "follow"}
            )
    config = runner_actions.load_config(workspace, commit)
    if not config.preview.command.strip():
        raise Invalid(
            f"workspace.toml at {commit[:12]} has no [preview] command; add one "
            "(with its port) to say how the app starts.",
            {"field": "ref", "commit": commit},
            code="no_preview_command",
        )
    review = runner_actions.admit_contract(workspace, actor, config, commit, ref, "a preview")
    preview = Preview(
        workspace=workspace,
        ref=ref,
        commit=commit,
        follow=follow,
        command=config.preview.command,
        port=config.preview.port,
        health_path=config.preview.health_path,
        idle_timeout_s=idle_timeout_s or settings.PREVIEW_IDLE_TIMEOUT_S,
        requested_by=actor.user,
        token=actor.token,
    )
    with transaction.atomic():
        preview.save()
        make_room(preview)
        _new_process(preview, actor, review)
        _signal_moved([preview.public_id])
        record(
            workspace.team,
            actor,
            "preview.started",
            f"preview:{preview.public_id}",
            workspace.slug,
            commit=commit,
            ref=ref,
            follow=follow,
        )
    return preview


def make_room(starting: Preview) -> None:
    """Previews count against the team's limit until stopped. At the limit, the team's
    longest-idle live preview (no proxied request for the longest time) is stopped with
    `stopped_for_quota` — unless every one served a request (or started) within
    QUOTA_PREVIEW_BUSY_S: then the new one is refused, since each is in use."""
    if starting.kind == "release":
        return  # a release is no preview: deploys decide what runs
    team = starting.workspace.team
    # Locks the team's row: two previews starting at once see each other.
    Team.objects.select_for_update().filter(pk=team.pk).first()
    limit = Limits.of(team).concurrent_previews
    live = list(
        Preview.objects.filter(workspace__team=team, state__in=LIVE_STATES, kind="preview")
        .exclude(pk=starting.pk)
        .select_related("workspace", "run")
    )
    over = len(live) - limit + 1
    if over <= 0:
        return
    busy_since = timezone.now() - timedelta(seconds=settings.QUOTA_PREVIEW_BUSY_S)

    def last_used(p: Preview) -> datetime:
        return p.last_request_at or p.ready_at or p.started_at

    idle = sorted((p for p in live if last_used(p) < busy_since), key=last_used)
    if len(idle) < over:
        raise QuotaExceeded(
            f"Team {team.slug} has {len(live)} live previews, its limit of {limit}, and each "
            f"served a request in the last {settings.QUOTA_PREVIEW_BUSY_S} s; stop one you "
            "no longer need, then start this one.",
            {"limit": "concurrent_previews", "max": limit, "live": [p.public_id for p in live]},
            retry_after=settings.QUOTA_PREVIEW_BUSY_S,
        )
    for victim in idle[:over]:
        stop_preview(
            victim, None, reason="stopped_for_quota", limit=limit, for_preview=starting.public_id
        )


def start_release(
    workspace: Workspace,
    actor: Actor,
    commit: str,
    ref: str,
    image: str,
    public: bool,
    review: ContractReview | None = None,
) -> Preview:
    """A release's process: the built `image`, with `[deploy]`'s command, port and
    health check, served on the workspace's release host once deploys switch to it.
    Never stopped for idleness or the preview quota. The caller admitted its contract
    (the build's, or a rollback's `review`)."""
    config = runner_actions.load_config(workspace, commit).deploy
    preview = Preview(
        workspace=workspace,
        kind="release",
        image=image,
        ref=ref,
        commit=commit,
        command=config.command,
        port=config.port,
        health_path=config.health_path,
        public=public,
        requested_by=actor.user,
        token=actor.token,
    )
    with transaction.atomic():
        preview.save()
        _new_process(preview, actor, review)
    return preview


def _new_process(preview: Preview, actor: Actor, review: ContractReview | None = None) -> None:
    run = services.start_service(
        preview.workspace,
        actor,
        preview.commit,
        preview.ref,
        preview.command,
        purpose=Purpose.RELEASE if preview.kind == "release" else Purpose.PREVIEW,
        image=preview.image or None,
        contract_review=review,
    )
    Preview.objects.filter(pk=preview.pk).update(
        run=run,
        state=PreviewState.STARTING,
        reason="",
        message="",
        exit_code=None,
        last_health_status=None,
        last_health_at=None,
        sandbox_pid=None,
        sandbox_netns=None,
        started_at=timezone.now(),
        ready_at=None,
        ended_at=None,
        last_request_at=None,
    )
    preview.refresh_from_db()


def _end_process(preview: Preview, who: str) -> None:
    # A preview of a session has no process of its own: the session's goes on.
    if preview.kind != "session" and preview.run is not None and preview.run.is_active:
        services.stop_service(preview.run, "service_stopped", who)


def stop_preview(
    preview: Preview, actor: Actor | None, reason: str = "stopped_by_user", **facts: Any
) -> Preview:
    """Stop a live preview: its state says why at once, the agent ends the process."""
    who = actor.label if actor else SYSTEM
    with transaction.atomic():
        if not preview.move(
            PreviewState.STOPPED,
            LIVE_STATES,
            reason=reason,
            message=describe(reason, preview, who=who, **facts),
            ended_at=timezone.now(),
        ):
            preview.refresh_from_db()
            if actor is None:
                return preview
            raise Conflict(
                f"The preview is already {preview.state}; restart it instead.",
                {"state": preview.state},
            )
        _end_process(preview, who)
        _signal_moved([preview.public_id])
        record(
            preview.workspace.team,
            actor,
            "preview.stopped",
            f"preview:{preview.public_id}",
            preview.workspace.slug,
            reason=reason,
        )
    return preview


def restart_preview(preview: Preview, actor: Actor, commit: str | None = None) -> Preview:
    """A new process for the preview, from its pinned commit (or `commit`, when a
    followed branch moved); a live process is stopped first. Its contract is admitted
    first, outside the transaction: a review it opens outlives the refusal."""
    if preview.kind == "session":
        raise Conflict(
            "This preview serves an app running in a session: start the app again there "
            "with an exec, then preview the session again "
            f"(POST /api/v1/sessions/{preview.session.public_id if preview.session else '…'}"
            "/preview).",
            {"session": preview.session.public_id if preview.session else None},
            code="session_preview",
        )
    # A release's process started again (deploys' restore after a crash, an engine
    # restart or a lapse) asks for its commit's contract as its build did: an approval
    # that lapsed since must not keep starting it (docs/security.md 29).
    target = commit or preview.commit
    config = runner_actions.load_config(preview.workspace, target)
    review = runner_actions.admit_contract(
        preview.workspace,
        actor,
        config,
        target,
        preview.ref,
        "a preview" if preview.kind == "preview" else "a release's restart",
    )
    with transaction.atomic():
        # Only the preview's row is locked: its run is a nullable join, which PostgreSQL
        # cannot lock FOR UPDATE.
        preview = (
            Preview.objects.select_for_update(of=("self",)).select_related("run").get(pk=preview.pk)
        )
        _end_process(preview, actor.label)
        if commit:
            config = runner_actions.load_config(preview.workspace, commit)
            Preview.objects.filter(pk=preview.pk).update(
                commit=commit,
                command=config.preview.command or preview.command,
                port=config.preview.port,
                health_path=config.preview.health_path,
            )
            preview.refresh_from_db()
        Preview.objects.filter(pk=preview.pk).update(restarts=preview.restarts + 1)
        if not preview.is_live:
            make_room(preview)
        _new_process(preview, actor, review)
        _signal_moved([preview.public_id])
        record(
            preview.workspace.team,
            actor,
            "preview.restarted",
            f"preview:{preview.public_id}",
            preview.workspace.slug,
            commit=preview.commit,
        )
    return preview


def hold_process(preview: Preview, reason: str, message: str) -> bool:
    """A release's process that deploys do not start again (its contract is held):
    stopped, saying why; False when it said so already (Preview.hold)."""
    with transaction.atomic():
        if not preview.hold(reason, message):
            return False
        _announce(preview)
    return True


def set_public(preview: Preview, actor: Actor, public: bool) -> Preview:
    """Only a team admin may call this (the door checks): anyone with the URL can then
    open the preview; Berth's cookies are still stripped before the app sees a request.
    Never a preview of a session granted secrets: its app could serve them to anyone."""
    with transaction.atomic():
        if public and preview.session_id is not None:
            # Under the session's row lock, as a grant is (sessions.actions.exec_in).
            session = Session.objects.select_for_update().get(pk=preview.session_id)
            if session.secret_names:
                raise Invalid(
                    f"Execs in session {session.public_id} were granted secrets "
                    f"({', '.join(session.secret_names)}), and its app could serve them "
                    "to anyone with the address: a preview of it stays private. Share it "
                    f"with a link (POST /api/v1/previews/{preview.public_id}/link), or "
                    "preview a session without grants.",
                    {"session": session.public_id, "secrets": session.secret_names},
                    code="session_granted_secrets",
                )
        Preview.objects.filter(pk=preview.pk).update(public=public)
        preview.refresh_from_db()
        record(
            preview.workspace.team,
            actor,
            "preview.made_public" if public else "preview.made_private",
            f"preview:{preview.public_id}",
            preview.workspace.slug,
        )
        visibility_changed([preview.public_id])
    return preview


def visibility_changed(public_ids: list[str]) -> None:
    """After commit, the open WebSockets of these previews (or release processes)
    check their viewers again (previews.tunnel_access)."""
    _signal_moved(public_ids)


def forget_viewers(
    previews: list[str] | None = None, user: int | None = None, token: int | None = None
) -> None:
    """Every preview gateway and web process drops its cached viewer answers about
    these previews, or about the cookies of this person or token (previews.lookups):
    their next request is decided anew, on a kept-alive connection too."""
    message: dict[str, object] = {"type": "viewers.drop"}
    if previews:
        message["previews"] = previews
    if user is not None:
        message["user"] = user
    if token is not None:
        message["token"] = token
    fanout.group_send(gate.VIEWERS_GROUP, message)


def on_access_lost(
    sender: object, team_id: int, user_id: int, token_id: int | None, **_: object
) -> None:
    """A token was revoked (its cookies go), or a member removed (all of theirs)."""
    if token_id is not None:
        forget_viewers(token=token_id)
    else:
        forget_viewers(user=user_id)


def _signal_moved(public_ids: list[str]) -> None:
    """After commit, wake whoever waits on these previews: requests the proxy holds,
    open WebSockets into them, the pages showing their state (previews.consumers)."""

    def send() -> None:
        for public_id in public_ids:
            fanout.group_send(gate.moves_group(public_id), {"type": "preview.moved"})

    transaction.on_commit(send)


def set_releases_public(workspace: Workspace, public: bool) -> None:
    """A workspace's release processes, live or not, become public or team-only at once
    (in the caller's transaction); their open WebSockets check their viewers again."""
    processes = Preview.objects.filter(workspace=workspace, kind="release")
    processes.update(public=public)
    visibility_changed(list(processes.values_list("public_id", flat=True)))


def issue_ticket(preview: Preview, actor: Actor) -> str:
    """A single-use ticket for the preview host (see previews.tickets), valid
    PREVIEW_TICKET_S seconds."""
    now = timezone.now()
    nonce = secrets.token_urlsafe(24)
    with transaction.atomic():
        PreviewTicket.objects.filter(expires_at__lt=now - timedelta(hours=1)).delete()
        PreviewTicket.objects.create(
            nonce=nonce,
            preview=preview,
            user=actor.user,
            token=actor.token,
            expires_at=now + timedelta(seconds=settings.PREVIEW_TICKET_S),
        )
    return nonce


# -- what the runner agent and the run's end move ------------------------------------


def _announce(preview: Preview) -> None:
    """Receivers (a release's deploy) hear of it after commit; their failure is logged,
    never allowed to undo the move."""

    def send() -> None:
        # Requests the proxy holds while the preview starts wake up (core.fanout).
        fanout.group_send(gate.moves_group(preview.public_id), {"type": "preview.moved"})
        for receiver, result in preview_changed.send_robust(Preview, preview=preview):
            if isinstance(result, Exception):
                logging.getLogger(__name__).error(
                    "%s failed after preview %s moved: %r", receiver, preview.public_id, result
                )

    transaction.on_commit(send)


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
        logstore.note(run.public_id, f"[preview] {preview.state}: {preview.message}")
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
        logstore.note(run.public_id, f"[preview] {preview.state}: {preview.message}")
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
