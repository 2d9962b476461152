"""JSON API doors onto runs (thin: access, then an action)."""

from typing import Any

from asgiref.sync import sync_to_async
from django.http import FileResponse, HttpRequest
from ninja import Field, Query, Router, Schema, Status
from pydantic import ConfigDict

from core.errors import NotFound
from runs import actions, quotas
from runs.access import access_run, may_see_outputs
from runs.artifacts import open_artifact
from runs.models import Purpose, Run
from runs.waiting import MAX_WAIT_S, wait_for_end
from workspaces.api import actor_of, workspace_for

router = Router(tags=["runs"])
EVENTS_SHOWN = 100  # in a run's own answer; /egress has all that were kept


class RunIn(Schema):
    # Anything not listed (privileged, binds, network_mode, cap_add, user, ...) is a 422,
    # never passed on to the engine.
    model_config = ConfigDict(extra="forbid")

    command: str = Field(min_length=1, max_length=100_000)
    ref: str | None = Field(None, max_length=200)
    # Bounds are checked by the action (sandbox.limits): a 422 naming the bound, the same
    # on every door.
    timeout_s: int | None = None
    env: dict[str, str] = Field(default_factory=dict, max_length=100)
    runtime: str | None = Field(None, pattern="^(runc|gvisor)$")
    secrets: list[str] = Field(default_factory=list, max_length=50)
    commit_changes: bool = False


class RerunIn(Schema):
    model_config = ConfigDict(extra="forbid")

    env: dict[str, str] = Field(default_factory=dict, max_length=100)


@router.post(
    "/workspaces/{slug}/runs",
    response={202: dict[str, Any]},
    summary="Run a command against a commit of the workspace",
)
def start_run(request: HttpRequest, slug: str, body: RunIn) -> Status:
    workspace = workspace_for(request, slug, "run")
    run = actions.start_run(
        workspace,
        actor_of(request),
        body.command,
        body.ref,
        body.timeout_s,
        body.env,
        body.runtime,
        body.secrets,
        body.commit_changes,
    )
    return Status(202, actions.run_summary(run))


@router.get("/workspaces/{slug}/runs", summary="Recent runs of a workspace")
def list_runs(request: HttpRequest, slug: str, limit: int = 50) -> list[dict[str, Any]]:
    workspace = workspace_for(request, slug, "run")
    runs = Run.objects.filter(workspace=workspace, purpose=Purpose.RUN).select_related(
        "workspace", "requested_by", "token", "rerun_of"
    )[: max(1, min(limit, 200))]
    actor = actor_of(request)
    return [actions.run_summary(r) for r in runs if may_see_outputs(actor, r)]


@router.get("/usage", summary="The token's team: live usage against each quota")
def usage(request: HttpRequest) -> dict[str, Any]:
    token = actor_of(request).token
    assert token is not None
    return quotas.usage(token.team)


@router.get(
    "/runs/{run_id}",
    summary="One run: inputs, state, outcome, timings; with "
    "?wait=N, first waits up to N seconds (max 120) for it to end",
)
async def get_run(
    request: HttpRequest, run_id: str, wait: int = Query(0, ge=0, le=MAX_WAIT_S)
) -> dict[str, Any]:
    # Async so that a client's wait (instead of polling) holds no thread of Django's.
    actor = actor_of(request)

    def summary(waited: Run | None = None) -> dict[str, Any]:
        # Read again after a wait, in one query (with what access_run selected).
        run = (
            access_run(actor, run_id)
            if waited is None
            else Run.objects.select_related("workspace__team", "requested_by", "token")
            .filter(pk=waited.pk)
            .first()
        )
        if run is None:  # its workspace was deleted while we waited
            raise NotFound("No such run.")
        return {**actions.run_summary(run), "egress": actions.egress_summary(run, EVENTS_SHOWN)}

    # In the request's thread, on the connection its authentication opened. Through a
    # wait that connection is kept only where threads keep theirs (DB_CONN_MAX_AGE):
    # the wait's own look at the row closes it otherwise.
    if not wait:
        return await sync_to_async(summary)()
    run = await sync_to_async(access_run)(actor, run_id)
    if run.is_active:
        await wait_for_end(run.public_id, wait)
    return await sync_to_async(summary)(run)


@router.post(
    "/runs/{run_id}/commit-changes",
    summary="Commit what a finished run changed, on the branch runs/<id>",
)
def commit_changes(request: HttpRequest, run_id: str) -> dict[str, Any]:
    actor = actor_of(request)
    run = access_run(actor, run_id)
    actions.commit_run_changes(run, actor)
    return actions.run_summary(run)


@router.get("/runs/{run_id}/egress", summary="Every connection the run's sandbox tried")
def egress_events(request: HttpRequest, run_id: str) -> dict[str, Any]:
    run = access_run(actor_of(request), run_id)
    return {
        "policy": run.network,
        "summary": actions.egress_summary(run),
        "events": [e.as_dict() for e in run.egress_events.all()],
    }


@router.post("/runs/{run_id}/cancel", response={202: dict[str, Any]}, summary="Cancel a run")
def cancel_run(request: HttpRequest, run_id: str) -> Status:
    actor = actor_of(request)
    run = actions.cancel_run(access_run(actor, run_id), actor)
    return Status(202, actions.run_summary(run))


@router.post(
    "/runs/{run_id}/rerun",
    response={202: dict[str, Any]},
    summary="Run again from exactly the recorded inputs",
)
def rerun(request: HttpRequest, run_id: str, body: RerunIn | None = None) -> Status:
    actor = actor_of(request)
    run = actions.rerun(access_run(actor, run_id), actor, body.env if body else {})
    return Status(202, actions.run_summary(run))


@router.get("/runs/{run_id}/artifacts", summary="The files a run kept ([artifacts] paths)")
def list_artifacts(request: HttpRequest, run_id: str) -> dict[str, Any]:
    summary = actions.run_summary(access_run(actor_of(request), run_id))
    return {
        "artifacts": summary["artifacts"],
        "refused": summary["artifacts_refused"],
        "expired_at": summary["outputs_expired_at"],
    }


@router.get(
    "/runs/{run_id}/artifacts/{path:path}", summary="Download one artifact", response={200: None}
)
def get_artifact(request: HttpRequest, run_id: str, path: str) -> FileResponse:
    run = access_run(actor_of(request), run_id)
    return FileResponse(
        open_artifact(run, path),
        as_attachment=True,
        filename=path.rsplit("/", 1)[-1],
        content_type="application/octet-stream",
    )
