from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.models import Team
from runs import quotas

FIELDS = {
    "runs": "max_concurrent_runs",
    "queued": "max_queued_runs",
    "previews": "max_concurrent_previews",
    "cpu_seconds": "cpu_seconds_per_day",
}


DEFAULT = -1  # "default" on the command line: remove the override


def limit(value: str) -> int:
    """A number, or "default" to fall back to the QUOTA_* setting."""
    if value == "default":
        return DEFAULT
    if not value.isdigit():
        raise ValueError(value)
    return int(value)


class Command(BaseCommand):
    help = (
        "Set a team's quotas (an operator's override of the QUOTA_* settings); "
        "'default' removes an override. With no option, shows them."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("team")
        parser.add_argument("--runs", type=limit, help="runs going at once")
        parser.add_argument("--queued", type=limit, help="runs waiting at most")
        parser.add_argument("--previews", type=limit, help="live previews at once")
        parser.add_argument(
            "--cpu-seconds",
            type=limit,
            dest="cpu_seconds",
            help="CPU-seconds per UTC day (0: no budget)",
        )

    def handle(self, *args: Any, team: str, **options: Any) -> None:
        found = Team.objects.filter(slug=team).first()
        if found is None:
            raise CommandError(f"No team {team!r}; `manage.py create_team {team}` makes one.")
        changed = {
            field: None if options[key] == DEFAULT else options[key]
            for key, field in FIELDS.items()
            if options.get(key) is not None
        }
        if changed:
            found.set_quotas(changed)
        limits = quotas.Limits.of(found)
        self.stdout.write(
            f"team {found.slug}: runs {limits.concurrent_runs} at once, "
            f"{limits.queued_runs} waiting, previews {limits.concurrent_previews},"
            f" CPU-seconds/day {limits.cpu_seconds_per_day or 'unlimited'}"
        )
