"""JSON API doors onto previews (thin: access, then an action)."""

from typing import Any

from django.http import HttpRequest
from ninja import Field, Router, Schema, Status
from pydantic import ConfigDict

from accounts.access import require_team_admin
from previews import actions
from previews.access import access_preview, managed_preview
from previews.links import ticket_url
from previews.models import Preview
from runs.logs_api import Cursor, log_page
from workspaces.api import actor_of, workspace_for

router = Router(tags=["previews"])


class PreviewIn(Schema):
    model_config = ConfigDict(extra="forbid")

    ref: str | None = Field(None, max_length=200)
    follow: bool = False
    idle_timeout_s: int | None = Field(None, ge=1, le=7 * 24 * 3600)


class PublicIn(Schema):
    model_config = ConfigDict(extra="forbid")

    public: bool


def _port(request: HttpRequest) -> str:
    return request.get_port()


@router.post(
    "/workspaces/{slug}/previews",
    response={202: dict[str, Any]},
    summary="Start a preview of a commit (the [preview] of its workspace.toml)",
)
def start_preview(request: HttpRequest, slug: str, body: PreviewIn | None = None) -> Status:
    workspace = workspace_for(request, slug, "preview")
    body = body or PreviewIn(ref=None, follow=False, idle_timeout_s=None)
    preview = actions.start_preview(
        workspace, actor_of(request), body.ref, body.follow, body.idle_timeout_s
    )
    return Status(202, actions.preview_summary(preview, _port(request)))


@router.get("/workspaces/{slug}/previews", summary="Recent previews of a workspace")
def list_previews(request: HttpRequest, slug: str, limit: int = 50) -> list[dict[str, Any]]:
    workspace = workspace_for(request, slug, "preview")
    previews = Preview.objects.filter(workspace=workspace, kind="preview").select_related(
        "workspace", "run", "requested_by", "token"
    )[: max(1, min(limit, 200))]
    return [actions.preview_summary(p, _port(request)) for p in previews]


@router.get("/previews/{preview_id}", summary="One preview: state, health, idle time, timings")
def get_preview(request: HttpRequest, preview_id: str) -> dict[str, Any]:
    return actions.preview_summary(access_preview(actor_of(request), preview_id), _port(request))


@router.post(
    "/previews/{preview_id}/stop", response={202: dict[str, Any]}, summary="Stop a preview"
)
def stop_preview(request: HttpRequest, preview_id: str) -> Status:
    actor = actor_of(request)
    preview = actions.stop_preview(managed_preview(actor, preview_id), actor)
    return Status(202, actions.preview_summary(preview, _port(request)))


@router.post(
    "/previews/{preview_id}/restart",
    response={202: dict[str, Any]},
    summary="Restart a preview from its commit",
)
def restart_preview(request: HttpRequest, preview_id: str) -> Status:
    actor = actor_of(request)
    preview = actions.restart_preview(managed_preview(actor, preview_id), actor)
    return Status(202, actions.preview_summary(preview, _port(request)))


@router.post(
    "/previews/{preview_id}/link",
    summary="A short-lived, single-use URL that opens the preview (sets its cookie)",
)
def link(request: HttpRequest, preview_id: str) -> dict[str, Any]:
    actor = actor_of(request)
    preview = access_preview(actor, preview_id)
    url, expires_at = ticket_url(preview, actor, _port(request))
    return {"url": url, "expires_at": expires_at.isoformat(), "single_use": True}


@router.post(
    "/previews/{preview_id}/public", summary="Make a preview public or private (team admins)"
)
def set_public(request: HttpRequest, preview_id: str, body: PublicIn) -> dict[str, Any]:
    actor = actor_of(request)
    preview = managed_preview(actor, preview_id)
    require_team_admin(actor, preview.workspace.team)
    preview = actions.set_public(preview, actor, body.public)
    return actions.preview_summary(preview, _port(request))


@router.get(
    "/previews/{preview_id}/logs",
    summary="The log of a preview's current process after a sequence number",
)
def preview_logs(
    request: HttpRequest, preview_id: str, after: Cursor = 0, limit: int = 1000
) -> dict[str, Any]:
    """As a run's log (`GET /runs/{id}/logs`); `run` names the process, which a restart
    replaces (its log then starts again from 0)."""
    preview = access_preview(actor_of(request), preview_id)
    if preview.run is None:
        return {"entries": [], "next": after, "complete": True, "run": None}
    return {**log_page(preview.run, after, limit), "run": preview.run.public_id}
