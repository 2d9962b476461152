"""A runner agent's word about its host: who it is, and its heartbeat (docs/hosts.md).

The agent checks its name before it touches anything (`claim`), then beats every
HOST_HEARTBEAT_S seconds with what its engine has and what its settings give it (`beat`).
"""

import logging
import time
from typing import Any

import docker.errors
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from sandbox.engine import engine, instance_label
from sandbox.hosts import DEFAULT_HOST, Host
from sandbox.models import this_host

log = logging.getLogger("berth.runner_agent")

# The one machine of `make run`: its agent makes its row. Any other name is added by an
# operator first, so a typo or a forgotten host never starts taking work by itself.


class HostRefused(Exception):
    """This agent may not act as its host: the message says what to do."""


# The engine's facts are asked for at most this often; every beat in between sends the
# last ones (a beat is then one database write, however often it comes).
FACTS_EVERY_S = 30.0
_facts: dict[str, Any] = {}
_facts_at = -FACTS_EVERY_S


def engine_facts() -> dict[str, Any]:
    """What the engine has: its version and ID, runtimes with their arguments, memory,
    and the ids of the images Berth made or loaded (the sandbox image, releases);
    asked again once FACTS_EVERY_S have passed."""
    global _facts, _facts_at
    if time.monotonic() - _facts_at < FACTS_EVERY_S:
        return _facts
    _facts = _ask_engine()
    _facts_at = time.monotonic()
    return _facts


def _ask_engine() -> dict[str, Any]:
    client = engine()
    info = client.info()
    images = client.api.images(filters={"reference": "berth-*"}) + client.api.images(
        filters={"label": [f"berth.instance={instance_label()['berth.instance']}"]}
    )
    return {
        "engine_version": str(client.version().get("Version", ""))[:40],
        "engine_id": str(info.get("ID", ""))[:100],
        "runtimes": {
            name: list(spec.get("runtimeArgs") or [])
            for name, spec in (info.get("Runtimes") or {}).items()
        },
        "memory_bytes": int(info.get("MemTotal") or 0),
        "images": sorted({image["Id"] for image in images}),
    }


def own_facts() -> dict[str, Any]:
    """What this host's settings say of it."""
    return {
        "slots": settings.RUNNER_SLOTS,
        "labels": dict(settings.HOST_LABELS),
        "gateway_address": settings.PREVIEW_GATEWAY_ADDRESS,
    }


def claim() -> Host:
    """This agent's host row, or HostRefused: an unknown name (an operator adds it), or
    a name another engine beats for (two hosts both left named `local`). An engine
    that does not answer yet cannot be told apart: the check is skipped."""
    name = this_host()
    try:
        engine_id = str(engine().info().get("ID", ""))
    except (docker.errors.DockerException, OSError):
        engine_id = ""
    with transaction.atomic():
        found = Host.objects.select_for_update().filter(name=name).first()
        if found is None and name == DEFAULT_HOST:
            found = Host.objects.create(name=name)
        if found is None:
            raise HostRefused(
                f"This host is named {name!r} (BERTH_SANDBOX_HOST) but Berth does not "
                f"know it: add it on the web host with `manage.py hosts add {name}`."
            )
        host = found
        _refuse_another_engine(host, engine_id)
        if engine_id:
            # Claimed now, under the lock: a second engine starting at the same moment
            # finds this one fresh and refuses.
            Host.objects.filter(pk=host.pk).update(engine_id=engine_id, heartbeat_at=timezone.now())
            host.refresh_from_db()
    return host


def _refuse_another_engine(host: Host, engine_id: str) -> None:
    if engine_id and host.engine_id not in ("", engine_id) and host.fresh():
        raise HostRefused(
            f"Host {host.name!r} is already beating from another engine ({host.engine_id}); "
            "give this machine a name of its own with BERTH_SANDBOX_HOST."
        )


def beat(name: str) -> bool:
    """One heartbeat of host `name`; False while its row is gone (forgotten by an
    operator): this agent then carries what it has to its end and is given nothing
    new. Found by name each time: a host forgotten and added again beats on."""
    facts = {**engine_facts(), **own_facts()}
    host = Host.objects.filter(name=name).first()
    if host is None:
        if name != DEFAULT_HOST:
            log.error("host %s is not known (forgotten?): nothing new is placed here", name)
            return False
        host, _ = Host.objects.get_or_create(name=name)
    # Another engine claimed the name since (this agent's beats lapsed past the bound):
    # this agent must stop, or two would reconcile one host's rows against two engines.
    _refuse_another_engine(host, facts["engine_id"])
    host.beat(facts)
    return True
