"""`{% pending_deploys workspace %}`: the count badge of deploy requests waiting for a
reviewer, for the workspace's tabs and the team dashboard (any page with a workspace)."""

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

from deploys.actions import release_url
from deploys.models import DeployRequest, DeployState, Route
from workspaces.models import Workspace

register = template.Library()


@register.simple_tag
def pending_deploys(workspace: Workspace) -> SafeString | str:
    waiting = DeployRequest.objects.filter(workspace=workspace, state=DeployState.REQUESTED).count()
    if not waiting:
        return ""
    return format_html(
        '<span class="badge pending-deploys" title="{} deploy request{} '
        'waiting for a reviewer">{}</span>',
        waiting,
        "" if waiting == 1 else "s",
        waiting,
    )


@register.simple_tag
def deploy_status(workspace: Workspace) -> SafeString:
    """One line for the workspace page: what is live, what waits, where to ask."""
    page = f"/t/{workspace.team.slug}/w/{workspace.slug}/deploys/"
    route = Route.objects.select_related("release").filter(workspace=workspace).first()
    waiting = DeployRequest.objects.filter(workspace=workspace, state=DeployState.REQUESTED).count()
    live = (
        format_html(
            'Release <a href="{}" target="_blank" rel="noopener">{}</a> live',
            release_url(workspace),
            route.release.number,
        )
        if route
        else "Nothing released"
    )
    queue = (
        format_html(' · <a href="{}">{} waiting for review</a>', page, waiting)
        if waiting
        else format_html(' · <a href="{}">Request a deploy</a>', page)
    )
    return format_html("{}{}", live, queue)
