"""The runner agent: one long-lived process per Docker host (DESIGN.md, "Processes").

For now it only reconciles: at start and every RECONCILE_EVERY_S seconds it removes
containers of this instance that nothing owns any more. Later issues register owners
(runs, previews, releases) and give the agent the live duties.
"""

import logging
import threading
from collections.abc import Callable

import docker
from docker.models.containers import Container

from runner.engine import engine, instance_label

log = logging.getLogger("berth.runner_agent")

RECONCILE_EVERY_S = 30

# kind label -> "is the owner with this id still live?". A container whose kind has
# no entry here, or whose owner is gone, is an orphan.
OWNERS: dict[str, Callable[[str], bool]] = {}


def owner_is_live(container: Container) -> bool:
    labels = container.labels or {}
    check = OWNERS.get(labels.get("berth.kind", ""))
    return bool(check and check(labels.get("berth.owner", "")))


def reconcile() -> list[str]:
    """Remove this instance's orphaned containers; returns their names."""
    label = "=".join(next(iter(instance_label().items())))
    removed = []
    for container in engine().containers.list(all=True, filters={"label": label}):
        if owner_is_live(container):
            continue
        try:
            container.remove(force=True)
        except docker.errors.NotFound:
            continue  # removed meanwhile: that is what we wanted
        removed.append(container.name)
        log.info("removed orphan container %s", container.name)
    return removed


def run_forever(stop: threading.Event) -> None:
    log.info("runner agent started; reconciling every %s s", RECONCILE_EVERY_S)
    while not stop.is_set():
        try:
            reconcile()
        except docker.errors.DockerException as e:
            # The engine may be restarting; the next tick tries again.
            log.warning("engine unavailable, will retry: %s", e)
        stop.wait(RECONCILE_EVERY_S)
