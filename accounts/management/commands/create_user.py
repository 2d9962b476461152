from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts import actions
from accounts.models import Role, Team
from core.errors import BerthError


class Command(BaseCommand):
    help = "Create a user in a team, or add an existing user to it with the given role."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--team", required=True)
        parser.add_argument("--role", required=True, choices=Role.values)
        parser.add_argument("--password", help="generated and printed when not given")

    def handle(
        self, *args: Any, username: str, team: str, role: str, password: str | None, **options: Any
    ) -> None:
        team_row = Team.objects.filter(slug=team).first()
        if team_row is None:
            raise CommandError(f"No team {team!r}; create it with `create_team {team}`.")
        try:
            user, generated = actions.create_user(team_row, username, role, None, password)
        except BerthError as e:
            raise CommandError(e.message) from e
        self.stdout.write(f"{user} is {role} in {team_row.slug}")
        if generated:
            self.stdout.write(f"password: {generated}")
