"""Which host new work goes to (docs/hosts.md): a first placement.

A host can take work when it is `ready` (not draining, not lost) and its engine has the
runtime asked for (gVisor only with `--oci-seccomp`, sandbox.hosts.Host.has_gvisor).
Among those, the least loaded: the smallest share of its slots in use. Runs are
counted against each host's slots at admission (runs.quotas); sessions, previews and
builds take no slot (as on one machine) and go to the host with the least work.
Reruns, caches, labels and images steer placement in the third runner-hosts issue.
"""

from django.db.models import Count

from core.errors import BerthError
from sandbox.docker import RUNTIMES
from sandbox.hosts import Host, HostState
from sandbox.models import LIVE_STATES, Sandbox


class NoHostReady(BerthError):
    status = 503
    code = "no_host_ready"


def able(runtime: str) -> list[Host]:
    """Ready hosts whose engine has `runtime` ("runc" or "gvisor"), by name."""
    engine_name = RUNTIMES.get(runtime, runtime)
    return [h for h in Host.objects.filter(state=HostState.READY) if h.has_runtime(engine_name)]


def load() -> dict[str, int]:
    """Host name → its live sandboxes: the work of every kind it carries."""
    return dict(
        Sandbox.objects.filter(state__in=LIVE_STATES)
        .values_list("host")
        .annotate(n=Count("id"))
        .values_list("host", "n")
    )


def choose(hosts: list[Host], load: dict[str, int], slotted: bool) -> Host | None:
    """The least loaded of `hosts` (share of its slots in use, then fewest, then name);
    with `slotted`, only one with a slot free."""
    if slotted:
        hosts = [h for h in hosts if load.get(h.name, 0) < h.slots]
    if not hosts:
        return None
    return min(
        hosts,
        key=lambda h: (load.get(h.name, 0) / max(h.slots, 1), load.get(h.name, 0), h.name),
    )


def place(runtime: str, load: dict[str, int], pinned: str = "") -> str:
    """The host for work that takes no slot (a session's, a preview's, a build's), or
    NoHostReady saying why none can. `pinned`: only that host may (a session's volume
    is there)."""
    hosts = able(runtime)
    if pinned:
        if not any(h.name == pinned for h in hosts):
            raise NoHostReady(
                f"This session's files are on host {pinned!r}, which cannot start it now "
                f"(it is draining, lost, or has no {runtime}); undrain it or wait for it "
                "to come back, or delete the session and start a new one.",
                {"host": pinned, "runtime": runtime},
            )
        return pinned
    host = choose(hosts, load, slotted=False)
    if host is None:
        raise NoHostReady(
            f"No host that can run {runtime} is ready: start a runner agent (make run "
            "starts one), or undrain a host (manage.py hosts).",
            {"runtime": runtime},
        )
    return host.name
