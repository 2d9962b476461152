"""`manage.py build_sandbox_image [--force]`: make the sandbox image usable here."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from sandbox.images import SandboxImageError, ensure_sandbox_image


class Command(BaseCommand):
    help = (
        "Build berth-sandbox:bookworm-<recipe hash> with debootstrap unless it exists, and "
        "tag it berth-sandbox:bookworm; with another SANDBOX_IMAGE, check that it is present."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--force", action="store_true", help="rebuild even if the recipe's image exists"
        )

    def handle(self, *args: Any, force: bool = False, **options: Any) -> None:
        try:
            ensure_sandbox_image(force=force, log=self.stdout.write)
        except SandboxImageError as e:
            raise CommandError(str(e)) from e
