"""Setting and deleting workspace secrets: admins only, values encrypted, never recorded.

The rule of who may manage secrets lives here, not in the doors, so the page and the
API cannot disagree about it.
"""

from django.db import transaction
from django.utils import timezone

from accounts.access import Actor, require_team_admin
from accounts.actions import record
from core.errors import Invalid, NotFound
from runs.models import Secret
from runs.secrets import MAX_VALUE_BYTES, check_name, encrypt
from workspaces.models import Workspace


def _check_value(value: str) -> str:
    if not value:
        raise Invalid("Give the secret a value.", {"field": "value"})
    size = len(value.encode())
    if size > MAX_VALUE_BYTES:
        raise Invalid(
            f"A secret value is at most {MAX_VALUE_BYTES} bytes; this one is {size}.",
            {"field": "value", "maximum": MAX_VALUE_BYTES},
            code="too_large",
        )
    if "\x00" in value:
        raise Invalid(
            "A secret value cannot contain a NUL character (it becomes an environment variable).",
            {"field": "value"},
        )
    if "\n" in value or "\r" in value:
        # Logs are masked line by line: a value spanning lines would appear in the log
        # unmasked, piece by piece.
        raise Invalid(
            "A secret value must be one line (output is masked line by line); "
            "base64-encode a multi-line value and decode it in the run.",
            {"field": "value"},
        )
    return value


def set_secret(workspace: Workspace, actor: Actor, name: str, value: str) -> Secret:
    """Create the secret `name` of the workspace, or replace its value.

    Runs waiting for a slot get the new value; runs already placed on a host keep (and
    are masked with) the value sealed for it then. The Activity row names the secret,
    never its value.
    """
    require_team_admin(actor, workspace.team)
    check_name(name)
    ciphertext = encrypt(_check_value(value))
    with transaction.atomic():
        now = timezone.now()
        secret, created = Secret.objects.select_for_update().get_or_create(
            workspace=workspace,
            name=name,
            defaults={
                "ciphertext": ciphertext,
                "created_by": actor.user,
                "created_at": now,
                "updated_at": now,
            },
        )
        if not created:
            secret.ciphertext, secret.updated_at = ciphertext, now
            secret.save(update_fields=["ciphertext", "updated_at"])
        record(
            workspace.team,
            actor,
            "secret.set",
            f"secret:{name}",
            workspace.slug,
            name=name,
            created=created,
        )
    return secret


def delete_secret(workspace: Workspace, actor: Actor, name: str) -> None:
    """Remove the secret `name`; later runs that ask for it get 422 `unknown_secret`."""
    require_team_admin(actor, workspace.team)
    with transaction.atomic():
        deleted, _ = Secret.objects.filter(workspace=workspace, name=name).delete()
        if not deleted:
            raise NotFound(f"No secret {name!r} in this workspace.", {"secret": name})
        record(workspace.team, actor, "secret.deleted", f"secret:{name}", workspace.slug, name=name)
