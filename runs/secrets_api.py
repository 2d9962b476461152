"""JSON API doors onto workspace secrets (thin: access, then an action).

No door ever answers a value: once set, a secret reaches only the runs that name it.
"""

from django.http import HttpRequest, HttpResponse
from ninja import Router

from core.schemas import answers
from runs import secret_actions
from runs.models import Secret
from runs.resource_schemas import SecretIn, SecretOut
from workspaces.api import actor_of, workspace_for

router = Router(tags=["secrets"])


@router.get(
    "/workspaces/{slug}/secrets",
    response=answers(list[SecretOut], 403, 404),
    summary="The workspace's secrets (names, never values)",
)
def list_secrets(request: HttpRequest, slug: str) -> list[SecretOut]:
    workspace = workspace_for(request, slug, "workspace:read")
    return [
        SecretOut.of(s)
        for s in Secret.objects.filter(workspace=workspace).select_related("created_by")
    ]


@router.put(
    "/workspaces/{slug}/secrets/{name}",
    response=answers(SecretOut, 403, 404, 422),
    summary="Set or replace a secret (admins)",
)
def set_secret(request: HttpRequest, slug: str, name: str, body: SecretIn) -> SecretOut:
    workspace = workspace_for(request, slug, "workspace:write")
    return SecretOut.of(secret_actions.set_secret(workspace, actor_of(request), name, body.value))


@router.delete(
    "/workspaces/{slug}/secrets/{name}",
    response=answers(None, 403, 404, status=204),
    summary="Delete a secret (admins)",
)
def delete_secret(request: HttpRequest, slug: str, name: str) -> HttpResponse:
    workspace = workspace_for(request, slug, "workspace:write")
    secret_actions.delete_secret(workspace, actor_of(request), name)
    return HttpResponse(status=204)
