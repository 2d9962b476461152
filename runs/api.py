"""JSON API doors onto runs (thin: access, then an action)."""

from asgiref.sync import sync_to_async
from django.http import FileResponse, HttpRequest
from ninja import Query, Router, Status

from core.errors import NotFound
from core.schemas import answers
from core.streams import in_chunks
from runs import actions, quotas
from runs.access import access_run, may_see_outputs
from runs.artifacts import open_artifact
from runs.models import Purpose, Run
from runs.resource_schemas import UsageOut
from runs.schemas import (
    ArtifactsOut,
    EgressEventOut,
    EgressOut,
    EgressPage,
    RerunIn,
    RunDetail,
    RunIn,
    RunOut,
)
from runs.waiting import MAX_WAIT_S, wait_for_end
from workspaces.api import actor_of, workspace_for

router = Router(tags=["runs"])
EVENTS_SHOWN = 100  # in a run's own answer; /egress has all that were kept


@router.post(
    "/workspaces/{slug}/runs",
    response=answers(RunOut, 403, 404, 409, 422, 429, status=202),
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
    return Status(202, RunOut.of(run))


@router.get(
    "/workspaces/{slug}/runs",
    response=answers(list[RunOut], 403, 404, 422),
    summary="Recent runs of a workspace",
)
def list_runs(request: HttpRequest, slug: str, limit: int = 50) -> list[RunOut]:
    workspace = workspace_for(request, slug, "run")
    runs = Run.objects.filter(workspace=workspace, purpose=Purpose.RUN).select_related(
        "workspace", "requested_by", "token", "rerun_of"
    )[: max(1, min(limit, 200))]
    actor = actor_of(request)
    return [RunOut.of(r) for r in runs if may_see_outputs(actor, r)]


@router.get(
    "/usage",
    response=answers(UsageOut),
    summary="The token's team: live usage against each quota",
)
def usage(request: HttpRequest) -> UsageOut:
    token = actor_of(request).token
    assert token is not None
    return UsageOut.model_validate(quotas.usage(token.team))


@router.get(
    "/runs/{run_id}",
    response=answers(RunDetail, 403, 404, 422),
    summary="One run: inputs, state, outcome, timings; with "
    "?wait=N, first waits up to N seconds (max 120) for it to end",
)
async def get_run(
    request: HttpRequest, run_id: str, wait: int = Query(0, ge=0, le=MAX_WAIT_S)
) -> RunDetail:
    # Async so that a client's wait (instead of polling) holds no thread of Django's.
    actor = actor_of(request)

    def summary(waited: Run | None = None) -> RunDetail:
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
        return RunDetail.of_run(run, EVENTS_SHOWN)

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
    response=answers(RunOut, 403, 404, 409),
    summary="Commit what a finished run changed, on the branch runs/<id>",
)
def commit_changes(request: HttpRequest, run_id: str) -> RunOut:
    actor = actor_of(request)
    run = access_run(actor, run_id)
    actions.commit_run_changes(run, actor)
    return RunOut.of(run)


@router.get(
    "/runs/{run_id}/egress",
    response=answers(EgressPage, 403, 404),
    summary="Every connection the run's sandbox tried",
)
def egress_events(request: HttpRequest, run_id: str) -> EgressPage:
    run = access_run(actor_of(request), run_id)
    return EgressPage(
        policy=run.network,
        summary=EgressOut.of(run),
        events=[EgressEventOut.of(e) for e in run.egress_events.all()],
    )


@router.post(
    "/runs/{run_id}/cancel",
    response=answers(RunOut, 403, 404, 409, status=202),
    summary="Cancel a run",
)
def cancel_run(request: HttpRequest, run_id: str) -> Status:
    actor = actor_of(request)
    run = actions.cancel_run(access_run(actor, run_id), actor)
    return Status(202, RunOut.of(run))


@router.post(
    "/runs/{run_id}/rerun",
    response=answers(RunOut, 403, 404, 409, 422, 429, status=202),
    summary="Run again from exactly the recorded inputs",
)
def rerun(request: HttpRequest, run_id: str, body: RerunIn | None = None) -> Status:
    actor = actor_of(request)
    run = actions.rerun(access_run(actor, run_id), actor, body.env if body else {})
    return Status(202, RunOut.of(run))


@router.get(
    "/runs/{run_id}/artifacts",
    response=answers(ArtifactsOut, 403, 404),
    summary="The files a run kept ([artifacts] paths)",
)
def list_artifacts(request: HttpRequest, run_id: str) -> ArtifactsOut:
    summary = RunOut.of(access_run(actor_of(request), run_id))
    return ArtifactsOut(
        artifacts=summary.artifacts,
        refused=summary.artifacts_refused,
        expired_at=summary.outputs_expired_at,
    )


@router.get(
    "/runs/{run_id}/artifacts/{path:path}",
    response=answers(None, 403, 404),
    summary="Download one artifact",
    openapi_extra={
        "responses": {
            200: {
                "description": "The artifact's bytes",
                "content": {
                    "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
                },
            }
        }
    },
)
def get_artifact(request: HttpRequest, run_id: str, path: str) -> FileResponse:
    run = access_run(actor_of(request), run_id)
    response = FileResponse(
        open_artifact(run, path),
        as_attachment=True,
        filename=path.rsplit("/", 1)[-1],
        content_type="application/octet-stream",
    )
    return in_chunks(response)
