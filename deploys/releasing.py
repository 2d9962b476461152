"""A release after its approval: the agent commits the build's image →
`on_build_finished` starts the release's process (a preview of kind "release") →
`on_process_changed` switches the route once it is healthy, then stops the previous;
a live release's process that crashes, or an engine restart, is restored when today's
approvals still admit its contract; once a release is live, old release images are
pruned (deploys.images).
"""

import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from accounts.access import Actor
from accounts.actions import record
from accounts.models import Membership, Role
from core import broker
from deploys.actions import fail_deploy
from deploys.images import prune_images
from deploys.models import DeployRequest, DeployState, Release, Route
from deploys.tasks import stop_release_process
from previews import actions as preview_actions
from previews.models import LIVE_STATES, Preview, PreviewState
from runs.models import Purpose, Run, RunState
from sandbox.models import this_host
from sandbox.placement import NoHostReady
from workspaces.reviews import ContractHeld

log = logging.getLogger(__name__)


def on_build_finished(sender: object, run: Run, **kwargs: object) -> None:
    """The build's end: its image becomes a release process, or the deploy fails (the
    live release, if any, keeps serving)."""
    if run.purpose != Purpose.BUILD:
        return
    deploy = (
        DeployRequest.objects.select_related("workspace__team", "requested_by", "token")
        .filter(build_run=run)
        .first()
    )
    if deploy is None or deploy.state != DeployState.BUILDING:
        return
    if run.state != RunState.SUCCEEDED:
        fail_deploy(
            deploy,
            "build_failed",
            f"The build ended {run.state} ({run.reason}): "
            f"{run.message} The live release, if any, still serves; its log says why.",
        )
        return
    release = Release.objects.get(request=deploy)
    with transaction.atomic():
        if not deploy.move(
            DeployState.RELEASING,
            (DeployState.BUILDING,),
            built_at=run.finished_at,
            releasing_at=timezone.now(),
        ):
            return
        actor = Actor(deploy.requested_by, deploy.token) if deploy.requested_by else None
        if actor is None:
            fail_deploy(
                deploy,
                "requester_gone",
                "The account that asked for this deploy is gone; ask for it again.",
            )
            return
        process = preview_actions.start_release(
            deploy.workspace,
            actor,
            deploy.commit,
            deploy.ref,
            release.image,
            public=not deploy.workspace.releases_team_only,
        )
        release.attach_process(process)


TYPED_START_FAILURES = ("listening_on_other_port", "process_exited", "not_listening")


def on_process_changed(sender: object, preview: Preview, **kwargs: object) -> None:
    """A release's process became healthy (switch to it), failed to start (the deploy
    fails; the live one keeps serving) or crashed while live (start it again)."""
    if preview.kind != "release":
        return
    release = (
        Release.objects.select_related("request__workspace__team", "workspace")
        .filter(process=preview)
        .first()
    )
    if release is None:
        return
    deploy = release.request
    if preview.state == PreviewState.READY:
        if deploy.state == DeployState.RELEASING:
            _switch(release)
        elif Route.objects.filter(release=release).exists():
            release.mark_restored()
    elif preview.state == PreviewState.FAILED and deploy.state == DeployState.RELEASING:
        # Why it never came up, typed as the process said it (a wrong port, an exit):
        # the reviewer and the agent see the same reason the release's process has.
        reason = preview.reason if preview.reason in TYPED_START_FAILURES else "health_failed"
        fail_deploy(
            deploy,
            reason,
            f"The release did not become healthy: "
            f"{preview.message} The live release, if any, still serves.",
        )
    elif (
        preview.state in (PreviewState.CRASHED, PreviewState.FAILED)
        and Route.objects.filter(release=release).exists()
    ):
        restore(release)


def _switch(release: Release) -> None:
    """Point the release host at `release` in one UPDATE, then stop the one before: a
    request in flight to the old process finishes (the proxy caches its target about a
    second; the old process gets RELEASE_DRAIN_S before it is stopped)."""
    deploy = release.request
    now = timezone.now()
    with transaction.atomic():
        previous = (
            Route.objects.select_for_update()
            .select_related("release__request")
            .filter(workspace=release.workspace)
            .first()
        )
        if (
            previous is not None
            and not release.rollback_of_id
            and not deploy.confirmed_older
            and previous.release.request.created_at > deploy.created_at
        ):
            # Both were approved, and the newer one went live first: this older one must
            # not replace it behind everyone's back.
            if deploy.move(
                DeployState.SUPERSEDED,
                (DeployState.RELEASING,),
                ended_at=now,
                reason="newer_release_live",
                message=f"Release {previous.release.number}, from a newer request, "
                "went live first; this older one was not switched in. "
                "Ask for it again and confirm, if it should replace it.",
            ):
                release.mark_ended(now)
                if release.process_id:
                    # A broker that is down delays it: restore_all's safety net stops it.
                    transaction.on_commit(
                        lambda: broker.send(stop_release_process, (release.process_id,))
                    )
            return
        Route.switch(previous, release, now)
        deploy.move(DeployState.LIVE, (DeployState.RELEASING,), live_at=now)
        release.mark_live(now)
        if previous is not None and previous.release_id != release.pk:
            old = Release.objects.select_related("request").get(pk=previous.release_id)
            old.mark_ended(now)
            old.request.move(
                DeployState.ROLLED_BACK if release.rollback_of_id else DeployState.SUPERSEDED,
                (DeployState.LIVE,),
                ended_at=now,
            )
            if old.process_id:
                transaction.on_commit(
                    lambda: broker.send(
                        stop_release_process, (old.process_id,), countdown=settings.RELEASE_DRAIN_S
                    )
                )
        record(
            release.workspace.team,
            None,
            "deploy.live",
            f"deploy:{deploy.public_id}",
            release.workspace.slug,
            release=release.number,
            commit=release.commit,
        )
        transaction.on_commit(lambda: prune_images(release.workspace))


def restore(release: Release) -> None:
    """The live release's process ended (a crash, an engine restart, a lapse of the
    approval it ran under): the same image again, health-checked; the route never moved,
    so it serves once healthy. Its contract is admitted first, as a new ask's would be
    (previews.actions.restart_preview): when today's approvals refuse it, it is not
    started (`_refuse`). Tries back off (2 s, doubling, at most 5 min) so a release that
    cannot start, or is refused, does not spin."""
    process = release.process
    if process is None or process.is_live:
        return
    now = timezone.now()
    wait = min(2 ** min(release.restorations, 8) * 2, 300)
    if release.restore_tried_at and now < release.restore_tried_at + timedelta(seconds=wait):
        return
    actor = _acting_for(release)
    if actor is None:
        return
    release.count_restore_try(now)
    try:
        preview_actions.restart_preview(process, actor)
    except ContractHeld as held:
        _refuse(release, process, actor, held)
    except NoHostReady as e:
        # Every host draining or lost: the backoff above tries again; the other
        # releases' restores go on meanwhile.
        log.warning("release %s not started again: %s", release.number, e.message)


def _refuse(release: Release, process: Preview, actor: Actor, held: ContractHeld) -> None:
    """Not started again: its process says why, naming the review that decides it, and
    the refusal is recorded once (the safety net asks again at each try, so once a
    reviewer approves that review the release serves again without a new build)."""
    if held.code == ContractHeld.code:
        then = "Once it is approved there, Berth starts this release again."
    else:
        then = "Ask for a deploy of a commit within the approved contract to replace it."
    message = f"Release {release.number} was not started again: {held.message} {then}"
    with transaction.atomic():
        if preview_actions.hold_process(process, held.code, message):
            record(
                release.workspace.team,
                actor,
                "deploy.restore_refused",
                f"deploy:{release.request.public_id}",
                release.workspace.slug,
                release=release.number,
                reason=held.code,
                review=held.details["review"],
            )


def _acting_for(release: Release) -> Actor | None:
    """Who a restore is recorded under: the requester, else an admin of the team."""
    if release.request.requested_by is not None:
        return Actor(release.request.requested_by)
    admin = (
        Membership.objects.select_related("user")
        .filter(team=release.workspace.team_id, role=Role.ADMIN)
        .first()
    )
    return Actor(admin.user) if admin else None


def restore_all() -> None:
    """The agent's safety net (every reconcile): a routed release whose process is not
    live is started again — after an engine restart the first tries may fail; and the
    process of a release the route moved away from is stopped if its stop task never
    came (the broker was down when it was sent). Each agent looks after the releases
    whose process ran on its own host (its image is there); one whose process never
    ran, any agent (the preview's row lock in restart_preview serialises two)."""
    here = Q(process__run__runner_host=this_host())
    for route in (
        Route.objects.select_related("release__process")
        .filter(
            Q(release__process__run__runner_host=this_host())
            | Q(release__process__run__isnull=True)
        )
        .exclude(release__process__state__in=LIVE_STATES)
    ):
        restore(route.release)
    # Well past the drain time, so the task (sent with that countdown) goes first.
    overdue = timezone.now() - timedelta(seconds=2 * settings.RELEASE_DRAIN_S + 30)
    for release in Release.objects.filter(
        here, ended_at__lt=overdue, process__state__in=LIVE_STATES
    ).exclude(process__in=Route.objects.values("release__process")):
        assert release.process_id is not None
        stop_release_process(release.process_id)
