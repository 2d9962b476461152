"""The one way Berth reaches the Docker engine, and how it names what it creates."""

from functools import cache

import docker
from django.conf import settings


@cache
def engine() -> docker.DockerClient:
    """A client for the local engine (DOCKER_HOST honoured); API version negotiated."""
    return docker.from_env(timeout=60)


def instance_label() -> dict[str, str]:
    """Every container, volume and image this instance creates carries this label."""
    return {"berth.instance": settings.BERTH_INSTANCE}


def resource_name(*parts: str) -> str:
    """`berth-<instance>-<parts>`: unique per instance, so instances sharing an engine
    never collide or touch each other's."""
    return "-".join(("berth", settings.BERTH_INSTANCE, *parts))
