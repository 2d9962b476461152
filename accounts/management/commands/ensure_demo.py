from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from accounts import actions
from accounts.models import Role


class Command(BaseCommand):
    help = "Create the demo team and its admin on first run; print the password once."

    def handle(self, *args: Any, **options: Any) -> None:
        team, _ = actions.create_team("demo", "Demo team")
        if get_user_model().objects.filter(username="admin").exists():
            return
        user, password = actions.create_user(team, "admin", Role.ADMIN, None)
        bar = "=" * 64
        self.stdout.write(
            f"{bar}\n  Demo admin created (shown once):\n"
            f"    username: {user}\n    password: {password}\n"
            f"  Forgot it? .venv/bin/python manage.py changepassword admin\n{bar}"
        )
