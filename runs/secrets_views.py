"""The Secrets page of a workspace: every member sees the names, admins set and delete.

Thin doors onto `runs.secret_actions`, which hold the admin rule; a value typed here
is never rendered back, not even when the form comes back with an error.
"""

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from accounts.access import Actor, require_team_admin
from accounts.models import Membership
from core.errors import BerthError
from runs import secret_actions
from runs.models import Secret
from workspaces.models import Workspace
from workspaces.views import urls_of, workspace_page


class SecretForm(forms.Form):
    name = forms.CharField(
        max_length=64,
        help_text="Upper-case letters, digits and _; "
        "the run sees it as an environment variable of this name.",
    )
    # Not stripped: a value is used exactly as typed.
    value = forms.CharField(
        strip=False, widget=forms.PasswordInput(attrs={"autocomplete": "new-password"})
    )


def secrets_response(
    request: HttpRequest,
    membership: Membership,
    workspace: Workspace,
    form: SecretForm,
    status: int = 200,
) -> HttpResponse:
    rows = Secret.objects.filter(workspace=workspace).select_related("created_by")
    ctx = {
        "membership": membership,
        "workspace": workspace,
        "urls": urls_of(workspace),
        "tab": "settings",
        "clone_url": workspace.git_url,
        "form": form,
        "secrets": rows,
        "page_url": reverse("workspace-secrets", args=[workspace.team.slug, workspace.slug]),
    }
    return render(request, "runner/secrets.html", ctx, status=status)


def forbidden(request: HttpRequest, e: BerthError) -> HttpResponse:
    return render(request, "error.html", {"message": e.message}, status=e.status)


@workspace_page
def secrets_page(
    request: HttpRequest, membership: Membership, workspace: Workspace
) -> HttpResponse:
    """GET: the names. POST: set one (create or replace), then the page again."""
    form = SecretForm(request.POST or None)
    if request.method != "POST":
        return secrets_response(request, membership, workspace, form)
    actor = Actor(membership.user)
    try:
        # Before the form is read: a member learns nothing from what they posted.
        require_team_admin(actor, workspace.team)
    except BerthError as e:
        return forbidden(request, e)
    status = 422
    if form.is_valid():
        name = form.cleaned_data["name"]
        try:
            secret_actions.set_secret(workspace, actor, name, form.cleaned_data["value"])
        except BerthError as e:
            field = e.details.get("field")
            form.add_error(field if field in form.fields else None, e.message)
            status = e.status
        else:
            messages.success(
                request, f"Secret {name} is set; runs get it only when they ask for it by name."
            )
            return redirect("workspace-secrets", team=membership.team.slug, slug=workspace.slug)
    return secrets_response(request, membership, workspace, form, status=status)


@require_POST
@workspace_page
def delete_secret(
    request: HttpRequest, membership: Membership, workspace: Workspace, name: str
) -> HttpResponse:
    try:
        secret_actions.delete_secret(workspace, Actor(membership.user), name)
    except BerthError as e:
        if e.status == 403:
            return forbidden(request, e)
        messages.error(request, e.message)
    else:
        messages.success(request, f"Deleted secret {name}; runs that ask for it are refused.")
    return redirect("workspace-secrets", team=membership.team.slug, slug=workspace.slug)
