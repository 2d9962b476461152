from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = (
        "Everything `make run` needs before serving: the sandbox image, migrations and "
        "the demo team. One process, because each manage.py start costs seconds."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        call_command("build_sandbox_image")
        call_command("migrate", interactive=False, verbosity=0)
        call_command("ensure_demo")
