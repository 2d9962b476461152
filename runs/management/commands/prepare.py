from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from core import dbrole, keys
from core.datadir import secure
from sandbox.hosts import keep_own_token


class Command(BaseCommand):
    help = (
        "Everything `make run` needs before serving: the sandbox image, migrations and "
        "the demo team. One process, because each manage.py start costs seconds."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        # First: an install from before umask 077 has a 0755 DATA_DIR and a 0644 database.
        if changed := secure(settings.DATA_DIR):
            self.stdout.write(f"Made {changed} files and folders in {settings.DATA_DIR} private.")
        # On the web host, the keys a runner host will need are there to copy; a runner
        # host has them already or stops here (docs/hosts.md).
        if keys.is_runner():
            keys.check_runner_keys()
        else:
            keys.make_shared()
        call_command("build_sandbox_image")
        if keys.is_runner():
            # Migrations and the demo team are the web host's: a runner's database role
            # may not change the schema (docs/hosts.md).
            return
        call_command("migrate", interactive=False, verbosity=0)
        # The tables a migration just made are a runner's too (docs/hosts.md).
        if settings.RUNNER_DB_ROLE:
            try:
                dbrole.grant(settings.RUNNER_DB_ROLE)
            except dbrole.RoleRefused as refused:
                raise CommandError(str(refused)) from None
            self.stdout.write(f"Granted runner role {settings.RUNNER_DB_ROLE} its tables.")
        call_command("ensure_demo")
        # This machine's own worker and agent reach the internal API as any runner
        # host's do (docs/hosts.md).
        if keep_own_token() is None:
            self.stderr.write(
                f"No host is named {settings.SANDBOX_HOST!r} (BERTH_SANDBOX_HOST): add it with "
                f"`manage.py hosts add {settings.SANDBOX_HOST}` and run prepare again, or "
                "this machine's worker cannot fetch its runs' files."
            )
