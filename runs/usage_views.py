"""The team's usage page: live use against each limit (runs.quotas), for every member."""

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from accounts.models import Membership
from accounts.views import team_page
from runs import quotas
from runs.models import ACTIVE_STATES, Purpose, Run


@team_page()
def usage_page(request: HttpRequest, membership: Membership) -> HttpResponse:
    team = membership.team
    active = (
        Run.objects.filter(workspace__team=team, purpose=Purpose.RUN, state__in=ACTIVE_STATES)
        .select_related("workspace")
        .order_by("queued_at", "id")
    )
    rows = [{"run": r, "queue": quotas.queue_position(r)} for r in active[:200]]
    return render(
        request,
        "runner/usage.html",
        {"membership": membership, "usage": quotas.usage(team), "active": rows},
    )
