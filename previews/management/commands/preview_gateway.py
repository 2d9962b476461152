import asyncio
import signal
from typing import Any

import uvloop
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from core import keys
from previews.relay import serve


class Command(BaseCommand):
    help = (
        "Serve preview and release hosts on PREVIEW_PORT: the fast path itself, the "
        "rest through Berth's web process."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--bind", default="127.0.0.1")
        parser.add_argument("--port", type=int, help="default: PREVIEW_PORT")
        parser.add_argument(
            "--app", default="127.0.0.1:8000", help="host:port of Berth's web process (daphne)"
        )

    def handle(self, *args: Any, bind: str, port: int | None, app: str, **options: Any) -> None:
        try:
            keys.check_runner_keys()
        except ImproperlyConfigured as e:
            raise CommandError(str(e)) from None
        port = port or int(settings.PREVIEW_PORT or 0)
        if not port:
            raise CommandError("Give --port, or set PREVIEW_PORT.")
        host, _, app_port = app.rpartition(":")
        if not host or not app_port.isdigit():
            raise CommandError(f"--app must be host:port, not {app!r}.")
        uvloop.run(self._serve(bind, port, (host, int(app_port))))

    async def _serve(self, bind: str, port: int, app: tuple[str, int]) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await serve(bind, port, app, stop)
