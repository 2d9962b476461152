import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from runner import agent


class Command(BaseCommand):
    help = "Run the runner agent for this Docker host (reconciles orphans)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="reconcile once and exit")

    def handle(self, *args: Any, once: bool, **options: Any) -> None:
        if once:
            removed = agent.reconcile()
            self.stdout.write(f"removed {len(removed)} orphan container(s)")
            return
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        agent.run_forever(stop)
