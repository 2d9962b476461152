"""A team's live previews against its limit, as runs.quotas.usage shows them."""

from typing import Any

from accounts.models import Team
from previews.models import LIVE_STATES, Preview
from runs.quotas import Limits


def usage(team: Team, limits: Limits) -> dict[str, Any]:
    live = Preview.objects.filter(workspace__team=team, kind="preview", state__in=LIVE_STATES)
    return {"live": live.count(), "max_concurrent": limits.concurrent_previews}
