"""Every state change of deploys. The approval rules live here, in one place, whatever
door is used (docs/architecture.md):
- only a signed-in person (never a token, so never MCP) with the reviewer or admin role
  in the workspace's team;
- never the requester, nor the owner of the token that asked (Actor.user is that owner);
- the approval is bound to the commit resolved at request time;
- a team may require N distinct approvers; the same person approving twice, or two at
  once past N, still makes exactly one release (a conditional state move).

After approval: a build run (runs.services.start_build); what follows, until the route
points at the new release, is in deploys.releasing.
"""

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from accounts.access import Actor, human_reviewer
from accounts.actions import record
from accounts.models import Membership, Role
from core.errors import Conflict, Forbidden, Invalid, NotFound
from deploys.models import IN_FLIGHT, Approval, DeployRequest, DeployState, Release, Route
from previews import actions as preview_actions
from previews import viewers as preview_viewers
from runs import actions as runner_actions
from runs import services
from workspaces.models import ContractReview, Workspace
from workspaces.reviews import ContractHeld
from workspaces.store import open_store, pin_commit

RELEASES_KEPT = 3


def request_deploy(
    workspace: Workspace, actor: Actor, ref: str | None = None, note: str = ""
) -> DeployRequest:
    """Ask to ship a commit: the ref is resolved now, and `[deploy]` must say how the
    app starts. Nothing is built until a reviewer approves."""
    ref = ref or workspace.default_branch
    with open_store(workspace) as store:
        commit = store.resolve(ref)
    config = runner_actions.load_config(workspace, commit)
    if not config.deploy.command.strip():
        raise Invalid(
            f"workspace.toml at {commit[:12]} has no [deploy] command; add one "
            "(with its port and health_path) to say how the release starts.",
            {"field": "ref", "commit": commit},
            code="no_deploy_command",
        )
    if len(note) > 5000:
        raise Invalid("Keep the note under 5,000 characters.", {"field": "note"})
    # A release build asks for the commit's sandbox contract: a widened one waits for
    # its own review before a deploy of it is even asked (workspaces.reviews).
    runner_actions.admit_contract(workspace, actor, config, commit, ref, "a release build")
    deploy = DeployRequest(
        workspace=workspace,
        ref=ref,
        commit=commit,
        note=note.strip(),
        requested_by=actor.user,
        token=actor.token,
    )
    with transaction.atomic():
        deploy.save()
        pin_commit(workspace, commit)
        record(
            workspace.team,
            actor,
            "deploy.requested",
            f"deploy:{deploy.public_id}",
            workspace.slug,
            commit=commit,
            ref=ref,
        )
    return deploy


def _reviewer(deploy: DeployRequest, actor: Actor, verb: str) -> Membership:
    """The human reviewer acting, or why not (accounts.access.human_reviewer)."""
    return human_reviewer(
        actor,
        deploy.workspace.team,
        f"{verb} a deploy",
        f"Only a signed-in person may {verb} a deploy: open the request's page in Berth. "
        "API tokens and MCP cannot.",
        {"deploy": deploy.public_id},
        "No such deploy.",
    )


def approve_deploy(
    deploy: DeployRequest, actor: Actor, confirm_older: bool = False, confirm_own: bool = False
) -> DeployRequest:
    _reviewer(deploy, actor, "approve")
    own = deploy.requested_by_id == actor.user.pk
    allowed = deploy.workspace.team.allow_self_approval
    if own and not (allowed and confirm_own):
        who = "your token" if deploy.token_id else "you"
        raise Forbidden(
            f"This deploy was asked for by {who}; another reviewer must approve it"
            + (
                " (your team allows self-approval: confirm that you approve your own request)."
                if allowed
                else "."
            ),
            {"requested_by": actor.user.username},
            code="own_request",
        )
    # The build runs under the commit's contract: approved on its own page first (a
    # review decided since the request may also have rejected it). Outside the
    # transaction, so a review this opens outlives the refusal.
    review = runner_actions.admit_contract(
        deploy.workspace,
        actor,
        runner_actions.load_config(deploy.workspace, deploy.commit),
        deploy.commit,
        deploy.ref,
        "a release build",
    )
    with transaction.atomic():
        deploy = (
            DeployRequest.objects.select_for_update()
            .select_related("workspace__team")
            .get(pk=deploy.pk)
        )
        if deploy.state != DeployState.REQUESTED:
            raise Conflict(
                f"This deploy is {deploy.state}; only a requested one can be approved.",
                {"state": deploy.state},
            )
        live = (
            Route.objects.select_related("release__request")
            .filter(workspace=deploy.workspace)
            .first()
        )
        if live and live.release.request.created_at > deploy.created_at and not confirm_older:
            raise Conflict(
                f"Release {live.release.number}, from a newer request, is live; "
                "approving this older one would replace it. Confirm to go on.",
                {"live_release": live.release.number},
                code="newer_release_live",
            )
        try:
            with transaction.atomic():
                Approval.objects.create(request=deploy, user=actor.user)
        except IntegrityError:
            raise Conflict("You have approved this deploy already.") from None
        # Only approvals of people who are reviewers or admins of the team now count.
        given = deploy.approvals.filter(
            user__memberships__team=deploy.workspace.team,
            user__memberships__role__in=(Role.REVIEWER, Role.ADMIN),
        ).count()
        needed = deploy.workspace.team.approvals_required
        record(
            deploy.workspace.team,
            actor,
            "deploy.approved",
            f"deploy:{deploy.public_id}",
            deploy.workspace.slug,
            commit=deploy.commit,
            approvals=given,
            needed=needed,
            self_approved=own,
        )
        if given >= needed and deploy.move(
            DeployState.APPROVED,
            (DeployState.REQUESTED,),
            approved_at=timezone.now(),
            confirmed_older=confirm_older,
        ):
            _start_build(deploy, actor, review)
    return deploy


def reject_deploy(deploy: DeployRequest, actor: Actor, reason: str) -> DeployRequest:
    _reviewer(deploy, actor, "reject")
    reason = reason.strip()
    if not reason:
        raise Invalid("Say why it is rejected: the requester reads it.", {"field": "reason"})
    with transaction.atomic():
        if not deploy.move(
            DeployState.REJECTED,
            (DeployState.REQUESTED,),
            reason="rejected",
            message=f"Rejected by {actor.user}: {reason[:2000]}",
            decided_by=actor.user,
            ended_at=timezone.now(),
        ):
            raise Conflict(
                f"This deploy is {deploy.state}; only a requested one can be rejected.",
                {"state": deploy.state},
            )
        record(
            deploy.workspace.team,
            actor,
            "deploy.rejected",
            f"deploy:{deploy.public_id}",
            deploy.workspace.slug,
            reason=reason[:500],
        )
    return deploy


def cancel_deploy(deploy: DeployRequest, actor: Actor) -> DeployRequest:
    """The requester (or a token of theirs) or a team admin withdraws a pending request;
    a cancelled request can never be approved."""
    is_admin = (
        actor.is_human
        and Membership.objects.filter(
            team=deploy.workspace.team_id, user=actor.user, role=Role.ADMIN
        ).exists()
    )
    if deploy.requested_by_id != actor.user.pk and not is_admin:
        raise Forbidden(
            "Only whoever asked for this deploy, or a team admin, may cancel it.",
            code="not_requester",
        )
    with transaction.atomic():
        if not deploy.move(
            DeployState.CANCELLED,
            (DeployState.REQUESTED,),
            reason="cancelled",
            message=f"Cancelled by {actor.label}.",
            decided_by=actor.user,
            ended_at=timezone.now(),
        ):
            raise Conflict(
                f"This deploy is {deploy.state}; only a requested one can be cancelled.",
                {"state": deploy.state},
            )
        record(
            deploy.workspace.team,
            actor,
            "deploy.cancelled",
            f"deploy:{deploy.public_id}",
            deploy.workspace.slug,
        )
    return deploy


# -- the release pipeline -------------------------------------------------------------


def _next_number(workspace: Workspace) -> int:
    """The workspace's next release number, under its row's lock (inside the caller's
    transaction): two approvals at once never pick the same one."""
    Workspace.objects.select_for_update().filter(pk=workspace.pk).first()
    return (Release.objects.filter(workspace=workspace).aggregate(n=Max("number"))["n"] or 0) + 1


def _start_build(deploy: DeployRequest, actor: Actor, review: ContractReview | None) -> None:
    workspace = deploy.workspace
    number = _next_number(workspace)
    image = f"berth-{settings.BERTH_INSTANCE}-release-{workspace.public_id}:{number}"
    run = services.start_build(
        workspace,
        actor,
        deploy.commit,
        deploy.ref,
        image,
        {"deploy": deploy.public_id},
        contract_review=review,
    )
    Release.objects.create(
        workspace=workspace, number=number, request=deploy, commit=deploy.commit, image=image
    )
    deploy.move(
        DeployState.BUILDING, (DeployState.APPROVED,), build_run=run, building_at=timezone.now()
    )


def fail_deploy(deploy: DeployRequest, reason: str, message: str) -> None:
    if deploy.move(
        DeployState.FAILED, IN_FLIGHT, reason=reason, message=message, ended_at=timezone.now()
    ):
        Release.objects.filter(request=deploy, live_at=None).update(ended_at=timezone.now())


def rollback(workspace: Workspace, actor: Actor, number: int) -> Release:
    """Serve an earlier release again: its kept image is started, health-checked and
    switched in (no rebuild). Only a human reviewer may."""
    target = (
        Release.objects.select_related("request").filter(workspace=workspace, number=number).first()
    )
    if target is None or target.live_at is None:
        raise NotFound(f"No release {number} that was ever live in this workspace.")
    _reviewer(target.request, actor, "roll back")
    if target.image_removed_at is not None:
        raise Conflict(
            f"Release {number}'s image was removed (only the last "
            f"{RELEASES_KEPT} are kept); deploy its commit again instead.",
            code="image_gone",
        )
    route = Route.objects.filter(workspace=workspace).first()
    if route and route.release_id == target.pk:
        raise Conflict(f"Release {number} is already live.")
    review = _admit_rollback(workspace, actor, target)
    with transaction.atomic():
        # A new request and release record who rolled back to what, in the same story;
        # the old request becomes rolled_back once this one is switched in.
        deploy = DeployRequest.objects.create(
            workspace=workspace,
            ref=f"release {number}",
            commit=target.commit,
            note=f"Rollback to release {number}",
            requested_by=actor.user,
            state=DeployState.RELEASING,
            approved_at=timezone.now(),
            releasing_at=timezone.now(),
        )
        Approval.objects.create(request=deploy, user=actor.user)
        release = Release.objects.create(
            workspace=workspace,
            number=_next_number(workspace),
            request=deploy,
            commit=target.commit,
            image=target.image,
            rollback_of=target,
        )
        process = preview_actions.start_release(
            workspace,
            actor,
            target.commit,
            deploy.ref,
            target.image,
            public=not workspace.releases_team_only,
            review=review,
        )
        release.attach_process(process)
        record(
            workspace.team,
            actor,
            "deploy.rolled_back",
            f"deploy:{deploy.public_id}",
            workspace.slug,
            to_release=number,
            commit=target.commit,
        )
    return release


def _admit_rollback(workspace: Workspace, actor: Actor, target: Release) -> ContractReview | None:
    """A rollback starts an older release's process under its commit's contract, which
    an approval that lapsed since (docs/security.md 29) may no longer cover: admitted as
    a new ask, or refused the same way (typed, its review opened or named), the refusal
    recorded. Outside any transaction, so the review it opens outlives the refusal."""
    try:
        return runner_actions.admit_contract(
            workspace,
            actor,
            runner_actions.load_config(workspace, target.commit),
            target.commit,
            target.request.ref,
            f"a rollback to release {target.number}",
        )
    except ContractHeld as held:
        record(
            workspace.team,
            actor,
            "deploy.rollback_refused",
            f"deploy:{target.request.public_id}",
            workspace.slug,
            release=target.number,
            reason=held.code,
            review=held.details["review"],
        )
        then = " Once it is approved, roll back again." if held.code == ContractHeld.code else ""
        raise ContractHeld(
            f"Release {target.number} was not rolled back to: {held.message}{then}",
            held.details,
            code=held.code,
        ) from None


def set_release_visibility(workspace: Workspace, actor: Actor, team_only: bool) -> None:
    """Releases are public by default; a team admin (the door checks) may limit them to
    the team, at once for the live one too. Berth's cookies are stripped either way."""
    with transaction.atomic():
        workspace.set_releases_team_only(team_only)
        preview_viewers.set_releases_public(workspace, not team_only)
        record(
            workspace.team,
            actor,
            "workspace.releases_visibility",
            f"workspace:{workspace.slug}",
            workspace.slug,
            team_only=team_only,
        )


def release_host(workspace: Workspace) -> str:
    return f"{workspace.slug}--{workspace.team.slug}.{settings.APPS_DOMAIN}"


def release_url(workspace: Workspace, port: str = "") -> str:
    port = settings.PREVIEW_PORT or port  # the gateway's, when there is one
    return f"http://{release_host(workspace)}" + (f":{port}" if port and port != "80" else "") + "/"
