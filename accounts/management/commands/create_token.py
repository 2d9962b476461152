from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts import actions
from accounts.models import ApiToken, Team
from accounts.secret_names import check_name
from core.errors import BerthError


class Command(BaseCommand):
    help = "Create an API token; the token alone is printed on the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--team", required=True)
        parser.add_argument("--user", required=True)
        parser.add_argument(
            "--scopes", required=True, help=f"comma-separated, from: {', '.join(ApiToken.SCOPES)}"
        )
        parser.add_argument(
            "--workspace",
            action="append",
            default=[],
            help="limit the token to this workspace (repeatable)",
        )
        parser.add_argument(
            "--secret",
            action="append",
            default=[],
            help="a secret name the token may grant to runs (repeatable)",
        )
        parser.add_argument(
            "--secrets",
            default="",
            help="secret names this token may grant to runs, comma-separated",
        )
        parser.add_argument("--expires-days", type=int, default=None)
        parser.add_argument("--name", default="cli")

    def handle(self, *args: Any, **o: Any) -> None:
        team = Team.objects.filter(slug=o["team"]).first()
        if team is None:
            raise CommandError(f"No team {o['team']!r}.")
        user = get_user_model().objects.filter(username=o["user"]).first()
        if user is None:
            raise CommandError(f"No user {o['user']!r}.")
        scopes = [s.strip() for s in o["scopes"].split(",") if s.strip()]
        names = [n.strip() for n in [*o["secret"], *o["secrets"].split(",")] if n.strip()]
        try:
            secret_names = [check_name(n) for n in dict.fromkeys(names)]
            token, secret = actions.create_token(
                team,
                user,
                o["name"],
                scopes,
                None,
                workspaces=o["workspace"],
                secret_names=secret_names,
                expires_days=o["expires_days"],
            )
        except BerthError as e:
            raise CommandError(e.message) from e
        self.stderr.write(
            f"token {token.name} for {user} in {team.slug}, scopes "
            f"{','.join(token.scopes)}, expires {token.expires_at:%Y-%m-%d}"
        )
        self.stdout.write(secret)
