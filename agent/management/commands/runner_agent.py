import asyncio
import signal
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from agent.loop import Agent, reconcile_once
from core import keys
from sandbox import webapi
from sandbox.heartbeat import HostRefused


class Command(BaseCommand):
    help = "Run the runner agent for this Docker host: carries every run to its end."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="reconcile once and exit")

    def handle(self, *args: Any, once: bool, **options: Any) -> None:
        try:
            keys.check_runner_keys()
            if keys.is_runner():
                self._introduce()
            if once:
                reconcile_once()
                self.stdout.write("reconciled")
                return
            asyncio.run(self._serve())
        except (HostRefused, ImproperlyConfigured) as e:
            raise CommandError(str(e)) from None

    def _introduce(self) -> None:
        """A runner host's token is the web host's word that it is this host: refused,
        the agent does not start; unanswered (the web host restarting), it starts."""
        try:
            name = webapi.check_identity()
        except webapi.WebRefused as e:
            raise CommandError(
                f"{e}. Set BERTH_HOST_TOKEN to what `manage.py hosts add "
                f"{settings.SANDBOX_HOST}` printed on the web host, and BERTH_WEB_URL to "
                "its address."
            ) from None
        except webapi.WebUnavailable as e:
            self.stderr.write(f"{e}; starting anyway (its API is asked again when needed)")
            return
        self.stdout.write(f"the web host at {settings.BERTH_WEB_URL} knows this host as {name}")

    async def _serve(self) -> None:
        for alias in connections:
            connections.settings[alias].update(
                CONN_MAX_AGE=settings.AGENT_DB_CONN_MAX_AGE, CONN_HEALTH_CHECKS=True
            )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        agent = Agent()
        await agent.run(stop)
        if agent.refused is not None:
            raise agent.refused
