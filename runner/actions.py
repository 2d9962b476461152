"""Every state change of runs: each writes Activity and sends work only after commit."""

import re
from typing import Any

from django.db import transaction
from django.utils import timezone

from accounts.access import Actor
from accounts.actions import record
from config.errors import Conflict, Invalid, NotFound
from runner.limits import effective_limits
from runner.models import ACTIVE_STATES, Run, RunState
from runner.outcomes import describe
from workspaces import config as workspace_config
from workspaces.gitstore import MODE_TREE
from workspaces.models import Workspace
from workspaces.store import open_store

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
RESERVED_ENV = {"PATH", "HOME", "USER", "HOSTNAME", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"}


def load_config(workspace: Workspace, commit: str) -> workspace_config.WorkspaceConfig:
    """The workspace.toml of `commit` (defaults when absent); a broken file is an error
    the caller can fix, named by line."""
    with open_store(workspace) as store:
        try:
            mode, sha = store.lookup(commit, workspace_config.FILENAME)
        except NotFound:  # absent: every key is optional
            return workspace_config.WorkspaceConfig()
        if mode == MODE_TREE:
            return workspace_config.WorkspaceConfig()
        text = store.blob(sha).decode("utf-8", "replace")
    return workspace_config.parse(text)


def start_run(workspace: Workspace, actor: Actor, command: str, ref: str | None = None,
              timeout_s: int | None = None, env: dict[str, str] | None = None,
              runtime: str | None = None) -> Run:
    """Record a run's inputs and queue it.

    1. The ref is resolved to a commit SHA now: the run never follows a moving branch.
    2. Limits come from that commit's workspace.toml, clamped to the operator's maxima
       (warnings on the run); request values past a maximum are refused.
    3. After commit, the `prepare_run` task (queue `runner`) creates and starts it.
    """
    from runner.tasks import prepare_run

    command = command.strip()
    if not command:
        raise Invalid("Give a command to run.", {"field": "command"})
    env = env or {}
    for name in env:
        if not ENV_NAME.match(name) or name in RESERVED_ENV:
            raise Invalid(f"{name!r} cannot be set: use letters, digits and _ (not "
                          f"{', '.join(sorted(RESERVED_ENV))}).", {"field": "env"})
    with open_store(workspace) as store:
        commit = store.resolve(ref or workspace.default_branch)
    config = load_config(workspace, commit)
    limits, warnings = effective_limits(config.sandbox, {"timeout_s": timeout_s})
    chosen_runtime = runtime or config.sandbox.runtime
    if chosen_runtime not in ("runc", "gvisor"):
        raise Invalid('runtime must be "runc" or "gvisor".', {"field": "runtime"})
    with transaction.atomic():
        run = Run.objects.create(
            workspace=workspace, ref=ref or workspace.default_branch, commit=commit,
            command=command, image=config.sandbox.image, runtime=chosen_runtime,
            limits=limits, network={"mode": "none", "egress": list(config.egress)},
            env_names=sorted(env), requested_by=actor.user, token=actor.token,
            warnings=warnings)
        record(workspace.team, actor, "run.started", f"run:{run.public_id}", workspace.slug,
               command=command[:200], commit=commit, runtime=chosen_runtime)
        # The values of env vars travel only in the task message, never into the database.
        transaction.on_commit(lambda: prepare_run.delay(run.pk, env))
    return run


def cancel_run(run: Run, actor: Actor) -> Run:
    """Stop a run. Queued or preparing ones end at once; running ones are signalled by
    the agent (SIGTERM, then SIGKILL after the grace period)."""
    if not run.is_active:
        raise Conflict(f"The run already ended ({run.state}).", {"state": run.state})
    state, message = describe("cancelled_by_user", who=actor.label)
    with transaction.atomic():
        Run.objects.filter(pk=run.pk, state__in=ACTIVE_STATES, stop_reason="").update(
            stop_reason="cancelled_by_user", stop_requested_by=actor.label)
        run.refresh_from_db()
        if run.state in (RunState.QUEUED, RunState.PREPARING):
            run.finish(state, "cancelled_by_user", message)
        record(run.workspace.team, actor, "run.cancelled", f"run:{run.public_id}",
               run.workspace.slug)
    return run


def run_summary(run: Run) -> dict[str, Any]:
    """The run as the API and pages show it (DESIGN.md's shape)."""
    def iso(value: Any) -> str | None:
        return value.isoformat() if value else None

    return {
        "id": run.public_id, "workspace": run.workspace.slug, "ref": run.ref,
        "commit": run.commit, "command": run.command, "state": run.state,
        "reason": run.reason or None, "message": run.message or None,
        "exit_code": run.exit_code, "image": run.image, "image_id": run.image_id or None,
        "runtime": run.runtime, "limits": run.limits, "network": run.network,
        "env": run.env_names, "isolation": run.isolation, "warnings": run.warnings,
        "requested_by": {"user": run.requested_by.username if run.requested_by else None,
                         "token": run.token.name if run.token else None},
        "timings": {k: iso(getattr(run, k)) for k in (
            "queued_at", "started_at", "hydrated_at", "setup_done_at", "process_started_at",
            "ready_at", "finished_at")},
        "log": {"entries": run.log_entries, "bytes": run.log_bytes},
        "log_url": f"/api/v1/runs/{run.public_id}/logs",
        "artifacts": [], "changes": None,
        "now": timezone.now().isoformat(),
    }
