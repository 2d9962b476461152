"""`{% pending_deploys workspace %}`: the count badge of deploy requests waiting for a
reviewer, for the workspace's tabs and the team dashboard (any page with a workspace)."""

from django import template
from django.utils.html import format_html

from deploys.models import DeployRequest, DeployState
from workspaces.models import Workspace

register = template.Library()


@register.simple_tag
def pending_deploys(workspace: Workspace) -> str:
    waiting = DeployRequest.objects.filter(workspace=workspace,
                                           state=DeployState.REQUESTED).count()
    if not waiting:
        return ""
    return format_html('<span class="badge pending-deploys" title="{} deploy request{} '
                       'waiting for a reviewer">{}</span>', waiting,
                       "" if waiting == 1 else "s", waiting)
