"""The live activity feed: each Activity row, once committed, signals its team's group
(`activity_<team id>`); watchers read the rows themselves (a dropped signal loses
nothing, as with run logs)."""

from typing import Any

from accounts.models import Activity
from core import fanout


def group_name(team_id: int) -> str:
    return f"activity_{team_id}"


def signal(team_id: int, activity_id: int) -> None:
    """Wake the team's feed watchers (in the background: the caller does not wait)."""
    fanout.group_send(group_name(team_id), {"type": "activity.signal", "id": activity_id})


def entry(row: Activity) -> dict[str, Any]:
    """A row as the page shows it: people and agent tokens told apart."""
    return {
        "id": row.id,
        "at": row.created_at.isoformat(),
        "who": row.actor_label,
        "kind": "agent" if row.token_id else ("person" if row.user_id else "system"),
        "verb": row.verb,
        "words": row.words,
        "target": row.target,
        "url": row.link or None,  # the target's page, under APP_URL
        "workspace": row.workspace,
    }


def rows_after(team_id: int, after: int, workspace: str = "", limit: int = 50) -> list[Any]:
    rows = (
        Activity.objects.filter(team_id=team_id, id__gt=after)
        .select_related("user", "token")
        .order_by("id")
    )
    if workspace:
        rows = rows.filter(workspace=workspace)
    return [entry(r) for r in rows[:limit]]
