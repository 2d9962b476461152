"""`{% pending_reviews workspace %}`: the count badge of sandbox contracts waiting for
a reviewer, for the workspace's tabs and the team dashboard, as for deploys."""

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

from workspaces.models import ContractReview, ReviewState, Workspace

register = template.Library()


@register.simple_tag
def pending_reviews(workspace: Workspace) -> SafeString | str:
    waiting = ContractReview.objects.filter(workspace=workspace, state=ReviewState.PENDING).count()
    if not waiting:
        return ""
    return format_html(
        '<span class="badge pending-reviews" title="{} sandbox contract{} waiting for a '
        'reviewer">{}</span>',
        waiting,
        "" if waiting == 1 else "s",
        waiting,
    )
