"""JSON API doors onto workspace secrets (thin: access, then an action).

No door ever answers a value: once set, a secret reaches only the runs that name it.
"""

from typing import Any

from django.http import HttpRequest, HttpResponse
from ninja import Field, Router, Schema
from pydantic import ConfigDict

from runs import secret_actions
from runs.models import Secret
from workspaces.api import actor_of, workspace_for

router = Router(tags=["secrets"])


class SecretIn(Schema):
    model_config = ConfigDict(extra="forbid")

    # The byte limit (MAX_VALUE_BYTES) is checked by the action, which names it.
    value: str = Field(max_length=1 << 20)


def secret_out(secret: Secret) -> dict[str, Any]:
    return {
        "name": secret.name,
        "created_at": secret.created_at.isoformat(),
        "updated_at": secret.updated_at.isoformat(),
        "created_by": secret.created_by.username if secret.created_by else None,
    }


@router.get("/workspaces/{slug}/secrets", summary="The workspace's secrets (names, never values)")
def list_secrets(request: HttpRequest, slug: str) -> list[dict[str, Any]]:
    workspace = workspace_for(request, slug, "workspace:read")
    return [
        secret_out(s)
        for s in Secret.objects.filter(workspace=workspace).select_related("created_by")
    ]


@router.put("/workspaces/{slug}/secrets/{name}", summary="Set or replace a secret (admins)")
def set_secret(request: HttpRequest, slug: str, name: str, body: SecretIn) -> dict[str, Any]:
    workspace = workspace_for(request, slug, "workspace:write")
    secret = secret_actions.set_secret(workspace, actor_of(request), name, body.value)
    return secret_out(secret)


@router.delete("/workspaces/{slug}/secrets/{name}", summary="Delete a secret (admins)")
def delete_secret(request: HttpRequest, slug: str, name: str) -> HttpResponse:
    workspace = workspace_for(request, slug, "workspace:write")
    secret_actions.delete_secret(workspace, actor_of(request), name)
    return HttpResponse(status=204)
