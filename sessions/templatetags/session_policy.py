"""`{% session_policy_form membership %}`: the team's session maxima on the members page,
beside the team's other policies (a form for an admin, the values for everyone)."""

from typing import Any

from django import template

from accounts.models import Membership
from sessions import policy
from sessions.models import SessionPolicy

register = template.Library()


@register.inclusion_tag("sessions/_policy.html", takes_context=True)
def session_policy_form(context: template.Context, membership: Membership) -> dict[str, Any]:
    team = membership.team
    values, top = SessionPolicy.of(team), policy.ceilings()
    return {
        "membership": membership,
        "csrf_token": context.get("csrf_token"),
        "rows": [
            {
                "name": name,
                "label": policy.NAMES[name],
                "value": values[name],
                "minimum": floor,
                "maximum": top[name],
                "unit": "" if name == "max_sessions" else "s",
            }
            for name, floor in policy.FLOORS.items()
        ],
        "own": policy.has_own(team),
        "live": policy.live_sessions(team),
    }
