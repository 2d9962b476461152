"""JSON API doors onto previews (thin: access, then an action)."""

from django.http import HttpRequest
from ninja import Router, Status

from accounts.access import require_team_admin
from core.schemas import answers
from previews import actions, viewers
from previews.access import access_preview, managed_preview
from previews.links import ticket_url
from previews.models import Preview
from previews.of_sessions import preview_session
from previews.schemas import (
    LinkOut,
    PreviewIn,
    PreviewLogPage,
    PreviewOut,
    PublicIn,
    SessionPreviewIn,
)
from runs.logs_api import Cursor, log_page
from sessions.access import access_session
from workspaces.api import actor_of, workspace_for

router = Router(tags=["previews"])


def _port(request: HttpRequest) -> str:
    return request.get_port()


@router.post(
    "/workspaces/{slug}/previews",
    response=answers(PreviewOut, 403, 404, 409, 422, 429, status=202),
    summary="Start a preview of a commit (the [preview] of its workspace.toml)",
)
def start_preview(request: HttpRequest, slug: str, body: PreviewIn | None = None) -> Status:
    workspace = workspace_for(request, slug, "preview")
    body = body or PreviewIn(ref=None, follow=False, idle_timeout_s=None)
    preview = actions.start_preview(
        workspace, actor_of(request), body.ref, body.follow, body.idle_timeout_s
    )
    return Status(202, PreviewOut.of(preview, _port(request)))


@router.post(
    "/sessions/{session_id}/preview",
    response=answers(PreviewOut, 403, 404, 409, 422, status=202),
    summary="Preview an app running in a session (one a detached exec started) on its port",
)
def preview_of_session(request: HttpRequest, session_id: str, body: SessionPreviewIn) -> Status:
    """Served by the preview gateway from the session's container while the session
    runs; a request to it is the session's activity, and resumes a frozen session."""
    actor = actor_of(request)
    session = access_session(actor, session_id, scope="preview")
    preview = preview_session(session, actor, body.port, body.health_path)
    return Status(202, PreviewOut.of(preview, _port(request)))


@router.get(
    "/workspaces/{slug}/previews",
    response=answers(list[PreviewOut], 403, 404, 422),
    summary="Recent previews of a workspace",
)
def list_previews(request: HttpRequest, slug: str, limit: int = 50) -> list[PreviewOut]:
    workspace = workspace_for(request, slug, "preview")
    previews = Preview.objects.filter(workspace=workspace, kind="preview").select_related(
        "workspace", "run", "requested_by", "token"
    )[: max(1, min(limit, 200))]
    return [PreviewOut.of(p, _port(request)) for p in previews]


@router.get(
    "/previews/{preview_id}",
    response=answers(PreviewOut, 403, 404),
    summary="One preview: state, health, idle time, timings",
)
def get_preview(request: HttpRequest, preview_id: str) -> PreviewOut:
    return PreviewOut.of(access_preview(actor_of(request), preview_id), _port(request))


@router.post(
    "/previews/{preview_id}/stop",
    response=answers(PreviewOut, 403, 404, 409, status=202),
    summary="Stop a preview",
)
def stop_preview(request: HttpRequest, preview_id: str) -> Status:
    actor = actor_of(request)
    preview = actions.stop_preview(managed_preview(actor, preview_id), actor)
    return Status(202, PreviewOut.of(preview, _port(request)))


@router.post(
    "/previews/{preview_id}/restart",
    response=answers(PreviewOut, 403, 404, 409, 422, 429, status=202),
    summary="Restart a preview from its commit",
)
def restart_preview(request: HttpRequest, preview_id: str) -> Status:
    actor = actor_of(request)
    preview = actions.restart_preview(managed_preview(actor, preview_id), actor)
    return Status(202, PreviewOut.of(preview, _port(request)))


@router.post(
    "/previews/{preview_id}/link",
    response=answers(LinkOut, 403, 404),
    summary="A short-lived, single-use URL that opens the preview (sets its cookie)",
)
def link(request: HttpRequest, preview_id: str) -> LinkOut:
    actor = actor_of(request)
    preview = access_preview(actor, preview_id)
    url, expires_at = ticket_url(preview, actor, _port(request))
    return LinkOut(url=url, expires_at=expires_at.isoformat(), single_use=True)


@router.post(
    "/previews/{preview_id}/public",
    response=answers(PreviewOut, 403, 404, 409, 422),
    summary="Make a preview public or private (team admins)",
)
def set_public(request: HttpRequest, preview_id: str, body: PublicIn) -> PreviewOut:
    actor = actor_of(request)
    preview = managed_preview(actor, preview_id)
    require_team_admin(actor, preview.workspace.team)
    preview = viewers.set_public(preview, actor, body.public)
    return PreviewOut.of(preview, _port(request))


@router.get(
    "/previews/{preview_id}/logs",
    response=answers(PreviewLogPage, 403, 404, 422),
    summary="The log of a preview's current process after a sequence number",
)
def preview_logs(
    request: HttpRequest, preview_id: str, after: Cursor = 0, limit: int = 1000
) -> PreviewLogPage:
    """As a run's log (`GET /runs/{id}/logs`); `run` names the process, which a restart
    replaces (its log then starts again from 0)."""
    preview = access_preview(actor_of(request), preview_id)
    if preview.run is None:
        return PreviewLogPage(entries=[], next=after, complete=True, run=None)
    page = log_page(preview.run, after, limit)
    return PreviewLogPage(**dict(page), run=preview.run.public_id)
