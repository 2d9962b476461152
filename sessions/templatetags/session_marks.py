"""`{% editor_session workspace branch %}`: on the editor page, the newest session that
follows the branch, for static/js/session_marks.js to mark the files its copy changed
and those a write left as the session had them. Always rendered (empty of a session
when there is none): a save's answer may name a session the page did not know."""

from typing import Any

from django import template
from django.urls import reverse

from sessions.models import Session
from sessions.sync import FOLLOWING
from workspaces.models import Workspace

register = template.Library()


@register.inclusion_tag("sessions/_editor_session.html")
def editor_session(workspace: Workspace, branch: str | None) -> dict[str, Any]:
    args = [workspace.team.slug, workspace.slug]
    session = (
        Session.objects.filter(workspace=workspace, ref=branch, state__in=FOLLOWING)
        .order_by("-pk")
        .first()
        if branch
        else None
    )
    out: dict[str, Any] = {
        "sessions_url": reverse("workspace-sessions", args=args),
        "session": session,
        "branch": branch,
    }
    if session is not None:
        out["marks_url"] = reverse("workspace-session-marks", args=[*args, session.public_id])
        out["conflicts"] = sorted(session.sync_conflicts or {})
    return out
