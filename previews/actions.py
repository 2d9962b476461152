"""Starting, restarting and stopping a preview's or a release's process, and the
quota that makes room for a new one. What a person asks writes Activity; each sends its
work after commit.

A preview's process is a Run of purpose "preview" (runs.services.start_service):
starting one is queueing that run; the runner agent carries it, health-checks it
(previews.watch) and ends it; previews.lifecycle moves the preview on from the
watcher's verdict and its run's end. Who may open a preview is previews.viewers.
"""

import logging
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
from previews import gate
from previews.models import LIVE_STATES, Preview, PreviewState, preview_changed
from previews.outcomes import describe
from runs import actions as runner_actions
from runs import services
from runs.models import Purpose
from runs.quotas import Limits
from workspaces.models import ContractReview, Workspace
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


def _signal_moved(public_ids: list[str]) -> None:
    """After commit, wake whoever waits on these previews: requests the proxy holds,
    open WebSockets into them, the pages showing their state (previews.consumers)."""

    def send() -> None:
        for public_id in public_ids:
            fanout.group_send(gate.moves_group(public_id), {"type": "preview.moved"})

    transaction.on_commit(send)


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
