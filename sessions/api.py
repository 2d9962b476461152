"""JSON API doors onto sessions and their execs (thin: access, then an action)."""

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest
from ninja import Query, Router, Status

from accounts.access import Actor
from accounts.models import Team
from core.schemas import answers
from runs.logs_api import Cursor, page_of
from runs.schemas import LogPage
from sessions import actions, changes, policy
from sessions.access import access_exec, access_session
from sessions.models import Exec, Session, SessionPolicy
from sessions.schemas import (
    ExecIn,
    ExecOut,
    KillIn,
    SessionChangesOut,
    SessionCommitIn,
    SessionCommitOut,
    SessionIn,
    SessionMaxima,
    SessionOut,
    SessionPolicyIn,
    SessionPolicyOut,
)
from sessions.waiting import MAX_WAIT_S, wait_for_exec, with_read
from workspaces.api import actor_of, workspace_for

router = Router(tags=["sessions"])


@router.post(
    "/workspaces/{slug}/sessions",
    response=answers(SessionOut, 403, 404, 409, 422, 429, status=201),
    summary="Open a session: a sandbox on a branch, kept alive between an agent's turns",
)
def open_session(request: HttpRequest, slug: str, body: SessionIn) -> Status:
    workspace = workspace_for(request, slug, "run")
    session = actions.open_session(
        workspace,
        actor_of(request),
        body.ref,
        body.runtime,
        idle_freeze_s=body.idle_freeze_s,
        idle_stop_s=body.idle_stop_s,
        lifetime_s=body.lifetime_s,
        retention_s=body.retention_s,
    )
    return Status(201, SessionOut.of(session))


@router.get(
    "/workspaces/{slug}/sessions",
    response=answers(list[SessionOut], 403, 404, 422),
    summary="A workspace's sessions, newest first (deleted ones too)",
)
def list_sessions(request: HttpRequest, slug: str, limit: int = 50) -> list[SessionOut]:
    workspace = workspace_for(request, slug, "run")
    rows = Session.objects.filter(workspace=workspace).select_related(
        "workspace__team", "run", "requested_by", "token"
    )
    return [SessionOut.of(s) for s in rows.order_by("-pk")[: max(1, min(limit, 200))]]


@router.get(
    "/sessions/{session_id}",
    response=answers(SessionOut, 403, 404, 422),
    summary="One session: state, clocks, and what survives each stop",
)
def get_session(request: HttpRequest, session_id: str) -> SessionOut:
    # Reading its state is not activity: a page or a script that watches a session must
    # not keep it from freezing (keep-alive is the explicit call).
    return SessionOut.of(access_session(actor_of(request), session_id, use=False))


@router.post(
    "/sessions/{session_id}/exec",
    response={
        **answers(ExecOut, 403, 404, 409, 422),
        **answers(ExecOut, status=202),
    },
    summary="Run a command in the session: 200 with its output if it ends within "
    "wait_seconds, else 202 with its handle",
)
async def exec_command(request: HttpRequest, session_id: str, body: ExecIn) -> Status:
    # Async so that a client's wait holds no thread of Django's.
    actor = actor_of(request)

    def start() -> Exec:
        session = access_session(actor, session_id)
        return actions.exec_in(
            session,
            actor,
            body.command,
            timeout_s=body.timeout_s,
            detach=body.detach,
            env=body.env,
            secret_names=body.secrets,
            cwd=body.cwd,
        )

    row = await sync_to_async(start)()
    if not body.detach and body.wait_seconds:
        await wait_for_exec(row.public_id, body.wait_seconds)
    answer = await sync_to_async(_exec_out)(row.pk)
    return Status(200 if answer.state == "ended" else 202, answer)


def _exec_out(pk: int) -> ExecOut:
    return ExecOut.of(Exec.objects.select_related("session", "requested_by", "token").get(pk=pk))


@router.get(
    "/sessions/{session_id}/execs",
    response=answers(list[ExecOut], 403, 404, 422),
    summary="A session's execs, newest first (each without its output)",
)
def list_execs(request: HttpRequest, session_id: str, limit: int = 50) -> list[ExecOut]:
    session = access_session(actor_of(request), session_id)
    rows = Exec.objects.filter(session=session).select_related("session", "requested_by", "token")
    return [ExecOut.of(r, with_output=False) for r in rows[: max(1, min(limit, 200))]]


@router.get(
    "/execs/{exec_id}",
    response=answers(ExecOut, 403, 404, 422),
    summary="One exec with its last lines; with wait_seconds, first waits for its end",
)
async def get_exec(
    request: HttpRequest, exec_id: str, wait_seconds: int = Query(0, ge=0, le=MAX_WAIT_S)
) -> ExecOut:
    row = await sync_to_async(access_exec)(actor_of(request), exec_id)
    if row.is_active and wait_seconds:
        await wait_for_exec(row.public_id, wait_seconds)
    return await sync_to_async(_exec_out)(row.pk)


@router.get(
    "/execs/{exec_id}/logs",
    response=answers(LogPage, 403, 404, 422),
    summary="An exec's log entries after a sequence number",
)
def exec_logs(request: HttpRequest, exec_id: str, after: Cursor = 0, limit: int = 1000) -> LogPage:
    row = access_exec(actor_of(request), exec_id)
    # Its state before the entries: all are written before its end.
    return page_of(row.public_id, not row.is_active, after, limit)


@router.post(
    "/execs/{exec_id}/kill",
    response=answers(ExecOut, 403, 404, 409, 422, status=202),
    summary="Stop an exec: SIGTERM to its process group, SIGKILL after the grace period",
)
def kill_exec(request: HttpRequest, exec_id: str, body: KillIn) -> Status:
    actor = actor_of(request)
    row = actions.kill_exec(access_exec(actor, exec_id), actor, body.force)
    return Status(202, ExecOut.of(row))


@router.post(
    "/sessions/{session_id}/keep-alive",
    response=answers(SessionOut, 403, 404, 409, 422),
    summary="Activity now: the idle clocks start again, and a frozen session resumes",
)
def keep_alive(request: HttpRequest, session_id: str) -> SessionOut:
    actor = actor_of(request)
    return SessionOut.of(actions.keep_alive(access_session(actor, session_id), actor))


@router.post(
    "/sessions/{session_id}/start",
    response=answers(SessionOut, 403, 404, 409, 422, 429, status=202),
    summary="Start a stopped session again, on its files as its last stop left them",
)
def start_session(request: HttpRequest, session_id: str) -> Status:
    actor = actor_of(request)
    return Status(202, SessionOut.of(actions.start_again(access_session(actor, session_id), actor)))


@router.post(
    "/sessions/{session_id}/stop",
    response=answers(SessionOut, 403, 404, 422, status=202),
    summary="Stop the session's container; its files stay until it is deleted",
)
def stop_session(request: HttpRequest, session_id: str) -> Status:
    actor = actor_of(request)
    # A stop ends what a covering actor is doing in it (its execs, its terminals): a
    # use, as a delete is (docs/security.md 35).
    session = access_session(actor, session_id)
    return Status(202, SessionOut.of(actions.stop_session(session, actor)))


@router.delete(
    "/sessions/{session_id}",
    response=answers(SessionOut, 403, 404, 422, status=202),
    summary="Delete the session with its uncommitted files (a live one is stopped first)",
)
def delete_session(request: HttpRequest, session_id: str) -> Status:
    actor = actor_of(request)
    session = access_session(actor, session_id)
    return Status(202, SessionOut.of(actions.delete_session(session, actor)))


def _policy_out(team: Team) -> SessionPolicyOut:
    return SessionPolicyOut(
        team=team.slug,
        source="team" if policy.has_own(team) else "defaults",
        live_sessions=policy.live_sessions(team),
        ceilings=SessionMaxima(**policy.ceilings()),
        **SessionPolicy.of(team),
    )


@router.get(
    "/session-policy",
    response=answers(SessionPolicyOut),
    summary="The token's team: its session maxima (live sessions, the four numbers)",
)
def get_session_policy(request: HttpRequest) -> SessionPolicyOut:
    token = actor_of(request).token
    assert token is not None
    return _policy_out(token.team)


@router.put(
    "/session-policy",
    response=answers(SessionPolicyOut, 403, 422),
    summary="Set the token's team's session maxima (an admin's token with workspace:write)",
)
def put_session_policy(request: HttpRequest, body: SessionPolicyIn) -> SessionPolicyOut:
    actor = actor_of(request)
    assert actor.token is not None
    policy.set_policy(actor.token.team, actor, body.model_dump())
    return _policy_out(actor.token.team)


def _read(actor: Actor, session_id: str, *scopes: str) -> int:
    session = access_session(actor, session_id)
    for scope in scopes:
        actor.require_scope(scope)
    return changes.ask_read(session).pk


@router.get(
    "/sessions/{session_id}/changes",
    response=answers(SessionChangesOut, 403, 404, 409, 422, 503),
    summary="The session's uncommitted changes against its base commit, with a diff "
    "(a frozen session resumes for it)",
)
async def session_changes(request: HttpRequest, session_id: str) -> SessionChangesOut:
    # Async: the wait for its agent's read holds no thread of Django's.
    actor = actor_of(request)

    def answer(pk: int) -> SessionChangesOut:
        done = changes.read_result(pk)
        return SessionChangesOut.of(done.session, done.base_commit, changes.describe(done))

    return await with_read(
        session_id, lambda: _read(actor, session_id), answer, settings.SESSION_READ_WAIT_S
    )


@router.post(
    "/sessions/{session_id}/commit",
    response=answers(SessionCommitOut, 403, 404, 409, 422, 503, status=201),
    summary="Commit the session's changes on its branch: a three-way merge with what the "
    "branch got meanwhile (overlaps refused, 409 merge_conflict with the paths)",
)
async def commit_session(request: HttpRequest, session_id: str, body: SessionCommitIn) -> Status:
    actor = actor_of(request)

    def commit(pk: int) -> SessionCommitOut:
        done = changes.read_result(pk)
        result = changes.commit(done, actor, body.message, body.paths)
        return SessionCommitOut.of(result, done.session)

    done = await with_read(
        session_id,
        lambda: _read(actor, session_id, "workspace:write"),
        commit,
        settings.SESSION_READ_WAIT_S,
    )
    return Status(201, done)
