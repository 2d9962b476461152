from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts import actions
from core.errors import BerthError


class Command(BaseCommand):
    help = "Create a team (does nothing if it exists)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug")
        parser.add_argument("--name", default="")

    def handle(self, *args: Any, slug: str, name: str, **options: Any) -> None:
        try:
            team, created = actions.create_team(slug, name)
        except BerthError as e:
            raise CommandError(e.message) from e
        self.stdout.write(f"{'Created' if created else 'Exists'}: team {team.slug}")
