"""Who may open a preview, and telling every door when that changes: a preview made
public or private (a team admin's choice) and a workspace's release processes made
public or team-only (deploys), single-use tickets for the preview host (previews.links),
and the cached viewer answers every gateway and web process drops when access is lost
(previews.lookups).
"""

import secrets
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from accounts.access import Actor
from accounts.actions import record
from core import fanout
from core.errors import Invalid
from previews import gate
from previews.actions import _signal_moved
from previews.models import Preview, PreviewTicket
from sessions.models import Session
from workspaces.models import Workspace


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
