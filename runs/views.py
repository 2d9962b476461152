"""The run pages: a workspace's runs (start one, see recent ones), one run with its live
log, cancel; and the run dock of the workspace page (its POST answers a fragment).
The doors onto a run's outputs (artifact download, re-run) are in `run_views.py`.

Thin doors: access through `workspace_page` and `access_run`, changes through
`runs.actions`, so a page obeys the API's rules and writes the same Activity rows.
"""

from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.template.defaultfilters import filesizeformat
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_POST

from accounts.access import Actor
from accounts.models import Membership
from core.errors import BerthError, Conflict, NotFound
from logs import logstore
from runs import actions, quotas
from runs.access import access_run
from runs.durations import took
from runs.forms import RunForm
from runs.models import Purpose, Run, RunState
from runs.run_sections import sections
from workspaces.models import Workspace
from workspaces.store import open_store
from workspaces.views import is_htmx, urls_of, workspace_page

RECENT_RUNS = 50
# The viewer keeps this many lines (MAX_LINES in runs.js); a page opened on a longer log
# starts there rather than stream entries it would only throw away.
VIEW_LINES = 20_000

# What to expect while a run is active (its `message` is written only at the end).
WAITING = {
    RunState.QUEUED: "Waiting for a worker to pick the run up.",
    RunState.PREPARING: "Creating the sandbox and copying the commit's files in.",
    RunState.RUNNING: "The command is running; its output streams below.",
}


def timings(run: Run) -> list[dict[str, Any]]:
    """The steps the run went through, each with how long it took since the one before."""
    steps = [
        ("Queued", run.queued_at),
        ("Admitted", run.admitted_at),
        ("Picked up by a worker", run.started_at),
        ("Source copied in", run.hydrated_at),
        ("Setup done", run.setup_done_at),
        ("Process started", run.process_started_at),
        ("Ready", run.ready_at),
        ("Finished", run.finished_at),
    ]
    rows, previous = [], None
    for label, at in steps:
        if at is None:
            continue
        rows.append({"label": label, "at": at, "took": took(previous, at)})
        previous = at
    return rows


def phase_bar(run: Run) -> list[dict[str, Any]]:
    """The run's time split into phases, as shares of the whole for a small bar: waiting
    (for a slot and a worker), preparing (sandbox and source), setup, the command."""
    end = run.finished_at or timezone.now()
    edges = [
        ("waiting", run.queued_at, run.started_at),
        ("preparing", run.started_at, run.hydrated_at),
        (
            "setup",
            run.hydrated_at,
            run.setup_done_at
            if run.setup_done_at and run.setup_done_at > (run.hydrated_at or end)
            else None,
        ),
        (
            "command",
            run.process_started_at,
            run.finished_at or (end if run.process_started_at else None),
        ),
    ]
    spans = [(name, (b - a).total_seconds()) for name, a, b in edges if a and b and b > a]
    total = sum(s for _, s in spans) or 1.0
    return [
        {"phase": name, "seconds": round(s, 2), "percent": round(100 * s / total, 1)}
        for name, s in spans
    ]


def isolation_rows(iso: dict[str, Any]) -> list[tuple[str, str]]:
    """What the engine says applied, in words; empty until the sandbox exists."""
    if not iso:
        return []

    def yes(value: Any) -> str:
        return "yes" if value else "no"

    memory = iso.get("memory_bytes")
    cpus = iso.get("nano_cpus")
    caps = f"dropped {', '.join(iso.get('cap_drop') or []) or 'none'}"
    if iso.get("cap_add"):
        caps += f"; added {', '.join(iso['cap_add'])}"
    rows = [
        ("Runtime", str(iso.get("runtime") or "runc")),
        ("User", str(iso.get("user") or "")),
        ("Capabilities", caps),
        ("Privileged", yes(iso.get("privileged"))),
        ("Seccomp", seccomp_text(iso.get("seccomp"))),
        ("Read-only root", yes(iso.get("read_only_root"))),
        ("Network", str(iso.get("network") or "")),
        ("Process limit", str(iso.get("pids_limit") or "none")),
        ("Memory", f"{memory // (1 << 20)} MB" if memory else "unlimited"),
        ("CPUs", f"{cpus / 1e9:g}" if cpus else "unlimited"),
    ]
    if iso.get("ulimits"):
        rows.append(("Ulimits", ", ".join(f"{k} {v}" for k, v in iso["ulimits"].items())))
    if iso.get("mounts"):
        rows.append(("Mounts", ", ".join(f"{m['target']} ({m['type']})" for m in iso["mounts"])))
    return rows


def seccomp_text(seccomp: Any) -> str:
    """The profile and what enforced it; an older run recorded only a word."""
    if not isinstance(seccomp, dict):
        return str(seccomp or "")
    name = seccomp.get("profile") or ""
    if seccomp.get("sha256"):
        name += f" (sha256 {seccomp['sha256'][:12]})"
    if seccomp.get("enforced"):
        return f"{name}, enforced by {seccomp.get('enforced_by')}"
    return f"{name}, not enforced by this runtime"


def limit_rows(limits: dict[str, Any]) -> list[tuple[str, str]]:
    names = [
        ("cpus", "CPUs", ""),
        ("memory_mb", "Memory", " MB"),
        ("disk_mb", "Disk", " MB"),
        ("timeout_s", "Timeout", " s"),
        ("pids", "Processes", ""),
        ("nofile", "Open files", ""),
        ("inodes", "Files and folders", ""),
    ]
    rows = [
        (
            label,
            f"{limits[key]:g}{unit}" if isinstance(limits[key], float) else f"{limits[key]}{unit}",
        )
        for key, label, unit in names
        if key in limits
    ]
    if "log_bytes" in limits:
        rows.append(("Log", str(filesizeformat(limits["log_bytes"]))))
    return rows


def requested_by(run: Run) -> str:
    who = run.requested_by.username if run.requested_by else "someone removed"
    return f"{who} (token {run.token.name})" if run.token else who


def run_context(
    run: Run, workspace: Workspace, rerun_error: str = "", rerun_missing: list[str] | None = None
) -> dict[str, Any]:
    """What the run page (and the dock) shows; a refused re-run comes back with its
    message and the env names still missing."""
    urls = run_urls(workspace, run)
    log_start = max(0, logstore.count(run.public_id) - VIEW_LINES)
    queue = quotas.queue_position(run)
    return {
        "run": run,
        "run_urls": urls,
        "waiting": queue["message"] if queue else WAITING.get(RunState(run.state), ""),
        "log_start": log_start,
        "timings": timings(run),
        "phases": phase_bar(run),
        "limits": limit_rows(run.limits),
        "isolation": isolation_rows(run.isolation),
        "who": requested_by(run),
        "total": took(run.queued_at, run.finished_at or timezone.now()),
        "elapsed_s": int(((run.finished_at or timezone.now()) - run.queued_at).total_seconds()),
        "ws_path": f"/ws/runs/{run.public_id}/logs",
        **sections(run, workspace),
        "rerun_error": rerun_error,
        "rerun_missing": rerun_missing or [],
        "caches_url": reverse("workspace-caches", args=[workspace.team.slug, workspace.slug]),
    }


def run_urls(workspace: Workspace, run: Run) -> dict[str, str]:
    args = [workspace.team.slug, workspace.slug, run.public_id]
    return {
        "page": reverse("workspace-run", args=args),
        "cancel": reverse("workspace-run-cancel", args=args),
        "rerun": reverse("workspace-run-rerun", args=args),
        "commit_changes": reverse("workspace-run-commit-changes", args=args),
    }


def page_context(
    request: HttpRequest, membership: Membership, workspace: Workspace
) -> dict[str, Any]:
    return {
        "membership": membership,
        "workspace": workspace,
        "urls": urls_of(workspace),
        "tab": "runs",
        "clone_url": workspace.git_url,
    }


def vary(response: HttpResponse) -> HttpResponse:
    patch_vary_headers(response, ["HX-Request"])
    return response


# -- the runs of a workspace -------------------------------------------------------------


@workspace_page
def runs_page(request: HttpRequest, membership: Membership, workspace: Workspace) -> HttpResponse:
    """GET: the form and recent runs. POST: start a run, then its page; from the
    workspace page's dock (htmx), the dock's fragment instead."""
    form = RunForm(workspace, request.POST or None, initial={"ref": workspace.default_branch})
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            run = actions.start_run(
                workspace,
                Actor(membership.user),
                data["command"],
                data["ref"] or None,
                data["timeout_s"],
                None,
                data["runtime"] or None,
                data["secrets"],
                data["commit_changes"],
            )
        except BerthError as e:
            # A ref that does not resolve comes from the store, named by `ref`, not `field`.
            field = e.details.get("field") or ("ref" if "ref" in e.details else "")
            form.add_error(field if field in RunForm.base_fields else None, e.message)
        else:
            if is_htmx(request):
                return vary(
                    render(
                        request,
                        "runner/dock.html",
                        {"workspace": workspace, **run_context(run, workspace)},
                        status=201,
                    )
                )
            return vary(redirect(run_urls(workspace, run)["page"]))
    if request.method == "POST" and is_htmx(request):
        return vary(render(request, "runner/dock.html#dock-error", {"form": form}, status=422))
    with open_store(workspace) as store:
        ref_choices = sorted(store.branches())
    runs = [
        {
            "run": r,
            "url": run_urls(workspace, r)["page"],
            "who": requested_by(r),
            "took": took(r.queued_at, r.finished_at or timezone.now()),
        }
        for r in Run.objects.filter(workspace=workspace, purpose=Purpose.RUN).select_related(
            "requested_by", "token"
        )[:RECENT_RUNS]
    ]
    # Not `branches`: the header would show its branch switcher, which has no use here.
    ctx = {
        **page_context(request, membership, workspace),
        "form": form,
        "runs": runs,
        "ref_choices": ref_choices,
        "secrets_url": reverse("workspace-secrets", args=[workspace.team.slug, workspace.slug]),
    }
    return vary(render(request, "runner/runs.html", ctx, status=422 if form.errors else 200))


# -- one run -----------------------------------------------------------------------------


def run_of(membership: Membership, workspace: Workspace, run_id: str) -> Run:
    """The run through the one access helper, and only under its own workspace's URL."""
    try:
        run = access_run(Actor(membership.user), run_id, "run")
    except NotFound as e:
        raise Http404(e.message) from e
    if run.workspace_id != workspace.pk:
        raise Http404("No such run.")
    run.workspace = workspace
    return run


@workspace_page
def run_page(
    request: HttpRequest, membership: Membership, workspace: Workspace, run_id: str
) -> HttpResponse:
    """The run; for htmx (the log viewer, when the run starts or ends) only `#run-status`."""
    run = run_of(membership, workspace, run_id)
    ctx = {**page_context(request, membership, workspace), **run_context(run, workspace)}
    template = "runner/run.html#run-status" if is_htmx(request) else "runner/run.html"
    return vary(render(request, template, ctx))


@require_POST
@workspace_page
def cancel(
    request: HttpRequest, membership: Membership, workspace: Workspace, run_id: str
) -> HttpResponse:
    run = run_of(membership, workspace, run_id)
    try:
        run = actions.cancel_run(run, Actor(membership.user))
    except Conflict as e:
        # Ended meanwhile (a race with the agent, or a second click): say so, no error.
        if not is_htmx(request):
            messages.info(request, e.message)
        run.refresh_from_db()
    if is_htmx(request):
        ctx = {**page_context(request, membership, workspace), **run_context(run, workspace)}
        return vary(render(request, "runner/run.html#run-status", ctx))
    return vary(redirect(run_urls(workspace, run)["page"]))
