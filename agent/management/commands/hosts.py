"""`manage.py hosts`: the machines that run sandboxes (docs/hosts.md).

hosts                 list them: state, last heartbeat, engine, runtimes, slots
hosts add NAME        a new host; prints its token once (only the hash is kept)
hosts key NAME        the key of the secrets sealed for it, for its BERTH_HOST_SECRETS_KEY
hosts drain NAME      nothing new goes to it; what it runs carries on
hosts undrain NAME    it takes new work again
hosts forget NAME     its row goes (refused while it still holds live sandboxes)
hosts db-role ROLE    grant a runner's PostgreSQL role what runners need, and no more
                      (again after each upgrade; `prepare` does it when
                      BERTH_RUNNER_DB_ROLE is set)
"""

import re
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Count
from django.utils import timezone

from core import dbrole, keys
from runs.models import ACTIVE_STATES, Run
from sandbox.hosts import NAME_PATTERN, Host
from sandbox.models import LIVE_STATES, Sandbox
from sessions.models import Session, SessionState

SAID = {
    "drain": "draining; its work carries on, nothing new goes to it",
    "undrain": "ready; it takes new work again",
}


class Command(BaseCommand):
    help = "List, add, drain, undrain or forget the hosts that run sandboxes."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "action",
            nargs="?",
            default="list",
            choices=["list", "add", "key", "drain", "undrain", "forget", "db-role"],
        )
        parser.add_argument(
            "name", nargs="?", help="the host's name (BERTH_SANDBOX_HOST there), or the role's"
        )

    def handle(self, *args: Any, action: str, name: str | None, **options: Any) -> None:
        if action == "list":
            self._list()
            return
        if not name:
            what = "role" if action == "db-role" else "host"
            raise CommandError(f"Say which {what}: manage.py hosts {action} {what.upper()}")
        if action == "add":
            self._add(name)
            return
        if action == "db-role":
            self._db_role(name)
            return
        host = Host.objects.filter(name=name).first()
        if host is None:
            known = ", ".join(Host.objects.values_list("name", flat=True)) or "none"
            raise CommandError(f"No host is named {name!r} (known: {known}).")
        if action == "key":
            self._key(name)
        elif action in SAID:
            changed = host.drain() if action == "drain" else host.undrain()
            self.stdout.write(
                f"{name}: {SAID[action]}" if changed else f"{name} is {host.state}: nothing changed"
            )
        else:
            self._forget(host)

    def _add(self, name: str) -> None:
        if not re.match(NAME_PATTERN, name):
            raise CommandError(
                f"{name!r} cannot name a host: use lowercase letters, digits and dashes, "
                "starting with a letter, at most 40."
            )
        if Host.objects.filter(name=name).exists():
            raise CommandError(f"A host named {name!r} exists already.")
        host = Host.objects.create(name=name)
        token = host.issue_token()
        self.stdout.write(
            f"Added host {name}. Its token, shown this once (only its hash is kept):\n"
            f"{token}\n"
            f"On that machine set BERTH_SANDBOX_HOST={name}, give it its secrets key "
            f"(manage.py hosts key {name}) and start its runner agent; it beats within "
            "seconds (manage.py hosts)."
        )

    def _key(self, name: str) -> None:
        """Derived again each time (core.keys.host_secrets_key), so nothing is kept."""
        if keys.is_runner():
            raise CommandError("Ask the web host: a runner host holds no other host's key.")
        self.stdout.write(keys.host_secrets_key(name))
        self.stderr.write(
            f"The key of the secrets sealed for {name}: set it as BERTH_HOST_SECRETS_KEY "
            f"there, or put it in {keys.host_secrets_file(name)} in its keys dir (0600). "
            "It opens only what is sealed for that host; keep it as secret as the rest."
        )

    def _db_role(self, role: str) -> None:
        try:
            given = dbrole.grant(role)
        except dbrole.RoleRefused as refused:
            raise CommandError(str(refused)) from None
        self.stdout.write(
            f"Role {role}: writes the rows of {len(given)} tables, reads "
            f"{', '.join(dbrole.READ_ONLY)}, never {', '.join(dbrole.CLOSED)} (docs/hosts.md)."
        )

    def _forget(self, host: Host) -> None:
        live = Sandbox.objects.filter(host=host.name, state__in=LIVE_STATES).count()
        runs = Run.objects.filter(runner_host=host.name, state__in=ACTIVE_STATES).count()
        sessions = Session.objects.filter(runner_host=host.name).exclude(state=SessionState.DELETED)
        held = [
            f"{n} {what}"
            for n, what in (
                (live, "live sandbox(es)"),
                (runs, "run(s) placed there and not ended"),
                (sessions.count(), "session(s) whose files are there"),
            )
            if n
        ]
        if held:
            raise CommandError(
                f"{host.name} still holds {', '.join(held)}: drain it, wait for its runs "
                "to end and delete its sessions (manage.py hosts shows its sandboxes), "
                "then forget it."
            )
        host.delete()
        self.stdout.write(f"Forgot host {host.name}; its agent is given nothing new.")

    def _list(self) -> None:
        now = timezone.now()
        live = dict(
            Sandbox.objects.filter(state__in=LIVE_STATES)
            .values_list("host")
            .annotate(n=Count("id"))
            .values_list("host", "n")
        )
        header = (
            "HOST", "STATE", "HEARTBEAT", "ENGINE", "RUNTIMES", "SANDBOXES", "SLOTS", "MEMORY",
            "IMAGES",
        )  # fmt: skip
        rows = [header]
        for host in Host.objects.all():
            if host.heartbeat_at is None:
                beat = "never"
            else:
                age = (now - host.heartbeat_at).total_seconds()
                beat = f"{age:.0f}s ago" + ("" if host.fresh(now) else " (stale)")
            runtimes = ["runc"] if "runc" in host.runtimes else []
            if host.has_gvisor:
                runtimes.append("gvisor")
            rows.append(
                (
                    host.name,
                    host.state,
                    beat,
                    host.engine_version or "-",
                    ",".join(runtimes) or "-",
                    str(live.get(host.name, 0)),
                    str(host.slots),
                    f"{host.memory_bytes / 2**30:.1f}G" if host.memory_bytes else "-",
                    str(len(host.images)),
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        for row in rows:
            self.stdout.write(
                "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
            )
        for host in Host.objects.all():
            if host.labels:
                labels = ", ".join(f"{k}={v}" for k, v in sorted(host.labels.items()))
                self.stdout.write(f"{host.name} labels: {labels}")
            if host.gateway_address:
                self.stdout.write(f"{host.name} gateway: {host.gateway_address}")
