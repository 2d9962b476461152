"""The doors of a run page onto its outputs: download a kept artifact, re-run it.

Thin like the rest of the run pages: the run through `run_of` (404 for anything the
person may not see), the file through `open_artifact` (only listed paths), the replay
through `actions.rerun` (the same rules and Activity row as the API).
"""

from django.contrib import messages
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from accounts.access import Actor
from accounts.models import Membership
from core.errors import BerthError, NotFound
from core.streams import in_chunks
from runs import actions
from runs.artifacts import open_artifact
from runs.forms import rerun_env
from runs.views import page_context, run_context, run_of, run_urls, vary
from workspaces.models import Workspace
from workspaces.views import workspace_page


# `workspace_page` is typed for HttpResponse; it only passes the streaming one on.
@require_GET
@workspace_page  # type: ignore[arg-type]
def artifact(
    request: HttpRequest, membership: Membership, workspace: Workspace, run_id: str, path: str
) -> FileResponse:
    run = run_of(membership, workspace, run_id)
    try:
        source = open_artifact(run, path)
    except NotFound as e:
        raise Http404(e.message) from e
    # What a run wrote is untrusted: always a download, never a page on Berth's origin.
    response = FileResponse(
        source,
        as_attachment=True,
        filename=path.rsplit("/", 1)[-1],
        content_type="application/octet-stream",
    )
    response["Content-Security-Policy"] = "default-src 'none'; sandbox"
    response["X-Content-Type-Options"] = "nosniff"
    return in_chunks(response)


@require_POST
@workspace_page
def rerun(
    request: HttpRequest, membership: Membership, workspace: Workspace, run_id: str
) -> HttpResponse:
    """Run again from exactly the recorded inputs, then the new run's page. Env values
    were never stored, so the form asks for them again; a refusal comes back on the
    run's page with the message (values typed are never rendered back)."""
    run = run_of(membership, workspace, run_id)
    try:
        new = actions.rerun(run, Actor(membership.user), rerun_env(run.env_names, request.POST))
    except BerthError as e:
        ctx = {
            **page_context(request, membership, workspace),
            **run_context(run, workspace, e.message, e.details.get("missing") or []),
        }
        return vary(render(request, "runner/run.html", ctx, status=e.status))
    return vary(redirect(run_urls(workspace, new)["page"]))


@require_POST
@workspace_page
def commit_changes(
    request: HttpRequest, membership: Membership, workspace: Workspace, run_id: str
) -> HttpResponse:
    """Commit a finished run's changes to `runs/<id>`, then back to its page."""
    run = run_of(membership, workspace, run_id)
    try:
        sha = actions.commit_run_changes(run, Actor(membership.user))
    except BerthError as e:
        messages.error(request, e.message)
    else:
        messages.success(request, f"Committed as {sha[:12]} on {run.changes_branch}.")
    return redirect(run_urls(workspace, run)["page"])
