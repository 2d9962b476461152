"""State changes of Sandbox rows that are not the engine loop's own: making one for an
owner, and removing one with its container and volume."""

from typing import Any

from django.db import IntegrityError, transaction

from sandbox.containers import remove_sandbox
from sandbox.models import LIVE_STATES, Sandbox


def provide(owner_kind: str, owner_id: str, kind: str, **spec: Any) -> Sandbox:
    """The owner's sandbox of that kind: made now with `spec`, or the one made before
    (a redelivered task), updated to `spec` while its container is not made yet."""
    found = Sandbox.objects.filter(owner_kind=owner_kind, owner_id=owner_id, kind=kind).first()
    if found is not None:
        Sandbox.objects.filter(pk=found.pk).update(**spec)
        found.refresh_from_db()
        return found
    sandbox = Sandbox(owner_kind=owner_kind, owner_id=owner_id, kind=kind, **spec)
    sandbox.name = Sandbox.engine_name(sandbox.public_id)
    try:
        with transaction.atomic():
            sandbox.save()
    except IntegrityError:  # another delivery made it meanwhile
        return Sandbox.objects.get(owner_kind=owner_kind, owner_id=owner_id, kind=kind)
    return sandbox


def of_owner(owner_kind: str, owner_id: str) -> list[Sandbox]:
    return list(Sandbox.objects.filter(owner_kind=owner_kind, owner_id=owner_id).order_by("pk"))


def remove(sandbox: Sandbox) -> None:
    """Its container and its /workspace volume (gone already is fine), then its row
    says so."""
    remove_sandbox(sandbox.name)
    sandbox.mark_removed()


def set_deadline(owner_kind: str, owner_id: str, deadline: Any) -> None:
    """Past it the engine loop stops each of the owner's sandboxes ("timeout")."""
    Sandbox.objects.filter(owner_kind=owner_kind, owner_id=owner_id).update(deadline=deadline)


def request_stop(owner_kind: str, owner_id: str, reason: str, by: str = "") -> list[Sandbox]:
    """Ask the engine loop to stop every live sandbox of the owner; returns them."""
    live = [s for s in of_owner(owner_kind, owner_id) if s.state in LIVE_STATES]
    for sandbox in live:
        sandbox.request_stop(reason, by)
    return live
