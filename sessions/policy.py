"""A team's session maxima (SessionPolicy): how many live sessions it may hold, and the
most each of a session's four numbers may be. An admin sets them, up to the operator's
ceilings; sessions opened from then on are held to them (open ones keep theirs)."""

from typing import Any

from django.conf import settings
from django.db import transaction

from accounts.access import Actor, require_team_admin
from accounts.actions import record
from accounts.models import Team
from core.errors import Invalid
from runs.quotas import Limits
from sessions.models import LIVE_STATES, Session, SessionPolicy

# The smallest value of each: a team may allow no session at all, and keep no stopped
# session's files; a clock of 0 s would stop a session before it could be used.
FLOORS = {
    "max_sessions": 0,
    "idle_freeze_s": 1,
    "idle_stop_s": 1,
    "lifetime_s": 1,
    "retention_s": 0,
}
NAMES = {
    "max_sessions": "Live sessions at once",
    "idle_freeze_s": "Idle time before a freeze",
    "idle_stop_s": "Idle time before a stop",
    "lifetime_s": "Lifetime of one start",
    "retention_s": "Retention of a stopped session's files",
}


def ceilings() -> dict[str, int]:
    """The most an admin may set (the operator's settings)."""
    return {
        "max_sessions": settings.SESSION_CEILING_SESSIONS,
        "idle_freeze_s": settings.SESSION_CEILING_IDLE_S,
        "idle_stop_s": settings.SESSION_CEILING_IDLE_S,
        "lifetime_s": settings.SESSION_CEILING_LIFETIME_S,
        "retention_s": settings.SESSION_CEILING_RETENTION_S,
    }


def has_own(team: Team) -> bool:
    """Whether an admin set the team's maxima (else they are the settings' defaults)."""
    return SessionPolicy.objects.filter(team=team).exists()


def check(values: dict[str, Any]) -> dict[str, int]:
    """Every number given, whole, between its floor and the operator's ceiling; the
    first one that is not is named with its bounds."""
    unknown = sorted(set(values) - set(FLOORS))
    if unknown:
        raise Invalid(f"Unknown field {unknown[0]}.", {"field": unknown[0]})
    top = ceilings()
    checked = {}
    for name, floor in FLOORS.items():
        value = values.get(name)
        if value is None:
            raise Invalid(f"Give {name} ({NAMES[name].lower()}).", {"field": name})
        if isinstance(value, bool) or not isinstance(value, int):
            raise Invalid(f"{name} is a whole number.", {"field": name})
        if value < floor:
            raise Invalid(
                f"{name} is at least {floor}.", {"field": name, "minimum": floor}, code="too_small"
            )
        if value > top[name]:
            raise Invalid(
                f"{name} is at most {top[name]} on this Berth (its operator's ceiling); ask "
                "the operator to raise SESSION_CEILING_* if the team needs more.",
                {"field": name, "maximum": top[name]},
                code="over_ceiling",
            )
        checked[name] = value
    return checked


def set_policy(team: Team, actor: Actor, values: dict[str, Any]) -> dict[str, int]:
    """The team's maxima, as an admin sets them (403 `admin_required` for anyone else).
    Open sessions keep the numbers they were opened with; a lower limit of live ones
    stops none, it only refuses new ones until the team is under it."""
    require_team_admin(actor, team)
    chosen = check(values)
    with transaction.atomic():
        before = SessionPolicy.of(team)
        SessionPolicy.objects.update_or_create(team=team, defaults=chosen)
        record(
            team,
            actor,
            "team.session_policy_changed",
            f"team:{team.slug}",
            before=before,
            after=chosen,
        )
    return chosen


def live_sessions(team: Team) -> int:
    return Session.objects.filter(workspace__team=team, state__in=LIVE_STATES).count()


def usage(team: Team, limits: Limits) -> dict[str, int]:
    """The team's live sessions against its limit, for runs.quotas.usage (USAGE_PARTS)."""
    return {"live": live_sessions(team), "max_concurrent": SessionPolicy.of(team)["max_sessions"]}
