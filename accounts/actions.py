"""Every state change of accounts: atomic, and each writes an Activity row."""

import logging
import secrets
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts import feed, socket_access, targets
from accounts.access import Actor
from accounts.egress import BadEntry, check_entries
from accounts.models import Activity, ApiToken, Invitation, Membership, Role, Team
from accounts.signals import announce_access_lost
from accounts.slugs import validate_slug
from core.errors import Conflict, Invalid

PATH_MAX = 300  # Activity.path's length


def record(
    team: Team, actor: Actor | None, verb: str, target: str = "", workspace: str = "", **detail: Any
) -> Activity:
    """Write the audit row of an action; `actor` None means the operator (a command)."""
    # A name a door accepts (a branch of 200 characters) with its kind's prefix can be
    # longer than the column: the row keeps its start (PostgreSQL would refuse it whole).
    target = target[: Activity._meta.get_field("target").max_length]
    path = targets.path_of(team.slug, workspace, target)
    if len(path) > PATH_MAX:  # a page of its own it cannot name whole: none
        path = ""
    row = Activity.objects.create(
        team=team,
        user=actor.user if actor else None,
        token=actor.token if actor else None,
        verb=verb,
        target=target,
        workspace=workspace,
        detail=detail,
        path=path,
    )
    # Watchers of the team's feed hear of it once it is committed (and only then).
    transaction.on_commit(lambda: _signal_safely(team.pk, row.pk))
    return row


def _signal_safely(team_id: int, activity_id: int) -> None:
    """A feed that cannot be told (Redis down) must never undo or fail the action."""
    try:
        feed.signal(team_id, activity_id)
    except Exception as e:
        logging.getLogger(__name__).warning("activity feed not signalled: %r", e)


def create_team(slug: str, name: str = "") -> tuple[Team, bool]:
    """Create team `slug`, or return the existing one (idempotent for scripts)."""
    validate_slug(slug, "team slug")
    with transaction.atomic():
        team, created = Team.objects.get_or_create(slug=slug, defaults={"name": name or slug})
        if created:
            record(team, None, "team.created", f"team:{slug}")
    return team, created


def _check_role(role: str) -> str:
    if role not in Role.values:
        raise Invalid(
            f"Unknown role {role!r}; use one of {', '.join(Role.values)}.", {"field": "role"}
        )
    return role


def _check_password(password: str, user: User | None = None) -> None:
    try:
        validate_password(password, user)
    except ValidationError as e:
        raise Invalid(" ".join(e.messages), {"field": "password"}, code="weak_password") from e


def create_user(
    team: Team, username: str, role: str, by: Actor | None, password: str | None = None
) -> tuple[User, str | None]:
    """Create a user in `team`; an existing user is added to the team instead.

    Returns the user and the password when one was generated (shown once).
    """
    _check_role(role)
    username = username.strip()
    if not username or len(username) > 150:
        raise Invalid("A username of 1–150 characters is required.", {"field": "username"})
    generated = None
    with transaction.atomic():
        user = User.objects.filter(username=username).first()
        if user is None:
            if password is None:
                password = generated = secrets.token_urlsafe(12)
            _check_password(password)
            user = User.objects.create_user(username=username, password=password)
            record(team, by, "user.created", f"user:{username}")
        elif password is not None:
            raise Conflict(
                f"The user {username!r} already exists; their password is theirs to change.",
                {"field": "username"},
            )
        membership, created = Membership.objects.get_or_create(
            team=team, user=user, defaults={"role": role}
        )
        if created:
            record(team, by, "member.added", f"user:{username}", role=role)
        elif membership.role != role:
            change_role(membership, role, by)
    return user, generated


def change_role(membership: Membership, role: str, by: Actor | None) -> Membership:
    _check_role(role)
    with transaction.atomic():
        membership = Membership.objects.select_for_update().get(pk=membership.pk)
        _keep_one_admin(membership, role)
        old, membership.role = membership.role, role
        membership.save(update_fields=["role"])
        record(
            membership.team, by, "member.role_changed", f"user:{membership.user}", old=old, new=role
        )
    return membership


def remove_member(membership: Membership, by: Actor) -> None:
    """Remove someone from a team; their tokens for it stop working at once."""
    with transaction.atomic():
        _keep_one_admin(membership, None)
        now = timezone.now()
        ApiToken.objects.filter(team=membership.team, user=membership.user, revoked_at=None).update(
            revoked_at=now
        )
        membership.delete()
        record(membership.team, by, "member.removed", f"user:{membership.user}")
        # Their open WebSockets (feed, logs; by session or token) end too, and what
        # caches their access (preview viewer answers) forgets it.
        transaction.on_commit(
            lambda: socket_access.signal_changed(membership.team_id, membership.user_id)
        )
        transaction.on_commit(
            lambda: announce_access_lost(membership.team_id, membership.user_id, None)
        )


def _keep_one_admin(membership: Membership, new_role: str | None) -> None:
    if membership.role == Role.ADMIN and new_role != Role.ADMIN:
        admins = Membership.objects.filter(team=membership.team, role=Role.ADMIN)
        if admins.count() <= 1:
            raise Conflict("A team needs at least one admin: make someone else admin first.")


def set_team_gvisor_policy(team: Team, actor: Actor, required: bool) -> Team:
    """Whether every run of every workspace of the team uses gVisor, whatever a
    workspace's settings, its workspace.toml or a request asks for (admins decide)."""
    with transaction.atomic():
        team.require_gvisor = required
        team.save(update_fields=["require_gvisor"])
        record(team, actor, "team.policy_changed", f"team:{team.slug}", require_gvisor=required)
    return team


def set_approvals_required(
    team: Team, actor: Actor, count: int, allow_self_approval: bool = False
) -> Team:
    """How many distinct reviewers must approve each deploy of the team, and whether
    the person who asked for a deploy or a sandbox contract (or whose token did) may
    approve it themselves, confirming it (admins decide; what was approved stays)."""
    if not 1 <= count <= 10:
        raise Invalid("Deploys need between 1 and 10 approvals.", {"field": "approvals_required"})
    with transaction.atomic():
        before = (team.approvals_required, team.allow_self_approval)
        team.approvals_required = count
        team.allow_self_approval = allow_self_approval
        team.save(update_fields=["approvals_required", "allow_self_approval"])
        record(
            team,
            actor,
            "team.policy_changed",
            f"team:{team.slug}",
            approvals_required=count,
            allow_self_approval=allow_self_approval,
            before={"approvals_required": before[0], "allow_self_approval": before[1]},
        )
    return team


def set_egress_ceiling(team: Team, actor: Actor, entries: list[str]) -> Team:
    """The most any workspace of the team may reach (admins decide). Runs already
    started keep the policy they started with; new ones are narrowed to this."""
    try:
        cleaned = list(dict.fromkeys(check_entries([e for e in entries if e.strip()])))
    except BadEntry as e:
        raise Invalid(str(e), {"field": "egress_ceiling"}, code="bad_egress_entry") from None
    with transaction.atomic():
        before = list(team.egress_ceiling)
        team.egress_ceiling = cleaned
        team.save(update_fields=["egress_ceiling"])
        record(
            team,
            actor,
            "team.egress_ceiling_changed",
            f"team:{team.slug}",
            before=before,
            after=cleaned,
        )
    return team


def create_invitation(team: Team, role: str, by: Actor, note: str = "") -> tuple[Invitation, str]:
    _check_role(role)
    with transaction.atomic():
        invitation, secret = Invitation.mint(
            team=team,
            role=role,
            note=note[:100],
            created_by=by.user,
            expires_at=timezone.now() + timedelta(days=settings.INVITATION_DAYS),
        )
        record(team, by, "invitation.created", f"invitation:{invitation.public_id}", role=role)
    return invitation, secret


def revoke_invitation(invitation: Invitation, by: Actor) -> None:
    with transaction.atomic():
        invitation.revoked_at = timezone.now()
        invitation.save(update_fields=["revoked_at"])
        record(invitation.team, by, "invitation.revoked", f"invitation:{invitation.public_id}")


def accept_invitation(secret: str, username: str, password: str) -> User:
    """Create the invitee's account and membership; the link works once."""
    with transaction.atomic():
        invitation = Invitation.find_open(secret, lock=True)
        if invitation is None:
            raise Invalid(
                "This invitation link is used, expired or revoked; ask for a new one.",
                code="invitation_closed",
            )
        username = username.strip()
        if not username or len(username) > 150:
            raise Invalid("A username of 1–150 characters is required.", {"field": "username"})
        if User.objects.filter(username=username).exists():
            raise Conflict(
                f"The username {username!r} is taken; choose another.", {"field": "username"}
            )
        _check_password(password)
        try:
            user = User.objects.create_user(username=username, password=password)
        except IntegrityError as e:  # a concurrent sign-up took the name
            raise Conflict(f"The username {username!r} is taken; choose another.") from e
        Membership.objects.create(team=invitation.team, user=user, role=invitation.role)
        invitation.accepted_by, invitation.accepted_at = user, timezone.now()
        invitation.save(update_fields=["accepted_by", "accepted_at"])
        record(
            invitation.team,
            Actor(user),
            "invitation.accepted",
            f"invitation:{invitation.public_id}",
            role=invitation.role,
        )
    return user


def create_token(
    team: Team,
    user: User,
    name: str,
    scopes: list[str],
    by: Actor | None,
    *,
    workspaces: list[str] | None = None,
    secret_names: list[str] | None = None,
    expires_days: int | None = None,
) -> tuple[ApiToken, str]:
    """Mint a token for `user` in `team`; returns it with its plaintext (shown once)."""
    name = name.strip() or "token"
    unknown = sorted(set(scopes) - set(ApiToken.SCOPES))
    if unknown or not scopes:
        raise Invalid(
            f"Unknown scope(s) {', '.join(unknown)}; use some of {', '.join(ApiToken.SCOPES)}."
            if unknown
            else f"Give at least one scope: {', '.join(ApiToken.SCOPES)}.",
            {"field": "scopes", "allowed": list(ApiToken.SCOPES)},
            code="invalid_scope",
        )
    days = settings.TOKEN_DEFAULT_DAYS if expires_days is None else expires_days
    if not 1 <= days <= settings.TOKEN_MAX_DAYS:
        raise Invalid(
            f"A token expires after 1 to {settings.TOKEN_MAX_DAYS} days.",
            {"field": "expires_days", "maximum": settings.TOKEN_MAX_DAYS},
        )
    workspaces = [validate_slug(w, "workspace slug") for w in (workspaces or [])]
    secret_names = [s.strip() for s in (secret_names or []) if s.strip()]
    if not Membership.objects.filter(team=team, user=user).exists():
        raise Invalid(f"{user} is not a member of team {team.slug}.", {"field": "user"})
    with transaction.atomic():
        token, secret = ApiToken.mint(
            team=team,
            user=user,
            name=name[:100],
            scopes=sorted(set(scopes)),
            workspaces=workspaces,
            secret_names=secret_names,
            expires_at=timezone.now() + timedelta(days=days),
        )
        record(
            team,
            by,
            "token.created",
            f"token:{token.public_id}",
            name=token.name,
            owner=str(user),
            scopes=token.scopes,
            workspaces=workspaces,
        )
    return token, secret


def revoke_token(token: ApiToken, by: Actor) -> ApiToken:
    with transaction.atomic():
        if token.revoked_at is None:
            token.revoked_at = timezone.now()
            token.save(update_fields=["revoked_at"])
            record(
                token.team,
                by,
                "token.revoked",
                f"token:{token.public_id}",
                name=token.name,
                owner=str(token.user),
            )
            # Sockets it opened stream on until they hear: tell them after commit.
            transaction.on_commit(
                lambda: socket_access.signal_changed(token.team_id, token.user_id)
            )
            transaction.on_commit(
                lambda: announce_access_lost(token.team_id, token.user_id, token.pk)
            )
    return token
