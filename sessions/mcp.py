"""MCP tools onto sessions, written for an agent that works in one sandbox turn after
turn: each answer says what survives and what the next useful call is, and each error
names the fix. Waits are asynchronous, so one agent's wait holds no thread of Django's."""

from channels.db import database_sync_to_async
from django.conf import settings

from accounts.auth import actor_of
from core.errors import Invalid
from core.mcp import Ctx, tool
from runs.logs_api import page_of
from runs.schemas import LogPage
from sessions import actions, changes
from sessions.access import access_exec, access_session
from sessions.models import Exec, Session, SessionState
from sessions.schemas import ExecOut, SessionCommitOut, SessionOut
from sessions.waiting import MAX_WAIT_S, wait_for_exec, wait_for_session, with_read
from workspaces.mcp import workspace_for


def _session(public_id: str) -> SessionOut:
    return SessionOut.of(
        Session.objects.select_related("workspace", "run", "requested_by", "token").get(
            public_id=public_id
        )
    )


def _exec(public_id: str) -> ExecOut:
    return ExecOut.of(
        Exec.objects.select_related("session", "requested_by", "token").get(public_id=public_id)
    )


MAX_PATHS = 1000


def _clamp(seconds: int) -> int:
    return max(0, min(seconds, MAX_WAIT_S))


@tool()
async def open_session(
    ctx: Ctx,
    workspace: str,
    ref: str | None = None,
    session: str | None = None,
    runtime: str | None = None,
    wait_seconds: int = 60,
    idle_freeze_s: int | None = None,
    idle_stop_s: int | None = None,
) -> SessionOut:
    """Open a session: a sandbox on a branch (default: the default branch) that lives
    between your turns, so installs in $HOME, running processes and warm caches stay
    until it stops. With `session`, start that stopped session again on its files
    instead. Waits up to wait_seconds (default 60, max 120) for it to be ready (a few
    seconds; longer when [setup] runs). idle_freeze_s and idle_stop_s (at most the
    team's maxima) say how long it may sit idle before it is frozen, then stopped. Then
    call exec(session=id, command=...)."""
    actor = await actor_of(ctx)

    def start() -> str:
        if session:
            found = access_session(actor, session)
            return actions.start_again(found, actor).public_id
        w = workspace_for(actor, workspace, "run")
        return actions.open_session(
            w, actor, ref, runtime, idle_freeze_s=idle_freeze_s, idle_stop_s=idle_stop_s
        ).public_id

    public_id = await database_sync_to_async(start)()
    await wait_for_session(
        public_id,
        (SessionState.READY, SessionState.FAILED, SessionState.STOPPED, SessionState.LOST),
        _clamp(wait_seconds),
    )
    return await database_sync_to_async(_session)(public_id)


@tool()
async def exec(
    ctx: Ctx,
    session: str,
    command: str,
    wait_seconds: int = 30,
    detach: bool = False,
    timeout_s: int | None = None,
    secrets: list[str] | None = None,
) -> ExecOut:
    """Run a shell command (`sh -c`) in the session, in /workspace, and wait up to
    wait_seconds (default 30, max 120) for it to end: the answer has its exit, a message
    saying what to do next, and its last 200 lines. A frozen session resumes for it.
    With detach, answers at once (for servers, watchers, long builds); read its output
    with read_output. `secrets` go in this command's environment only."""
    actor = await actor_of(ctx)

    def start() -> str:
        found = access_session(actor, session)
        return actions.exec_in(
            found, actor, command, timeout_s=timeout_s, detach=detach, secret_names=secrets
        ).public_id

    public_id = await database_sync_to_async(start)()
    if not detach:
        await wait_for_exec(public_id, _clamp(wait_seconds))
    return await database_sync_to_async(_exec)(public_id)


@tool()
async def read_output(
    ctx: Ctx, exec_id: str, after: int = 0, limit: int = 1000, wait_seconds: int = 0
) -> LogPage:
    """An exec's output after the cursor `after` (0 for the start), oldest first, at
    most `limit` (max 5000); `complete` says it ended and nothing follows. With
    wait_seconds, first waits for it to end."""
    actor = await actor_of(ctx)
    row = await database_sync_to_async(lambda: access_exec(actor, exec_id))()
    if row.is_active:
        await wait_for_exec(row.public_id, _clamp(wait_seconds))

    def page() -> LogPage:
        fresh = access_exec(actor, exec_id)
        return page_of(fresh.public_id, not fresh.is_active, after, limit)

    return await database_sync_to_async(page)()


@tool()
async def session_status(ctx: Ctx, session: str) -> SessionOut:
    """The session's state, its clocks (when it freezes, stops, is deleted) and what
    survives each stop. Reading it is not activity (keep_alive is). Instant."""
    actor = await actor_of(ctx)
    return await database_sync_to_async(
        lambda: SessionOut.of(access_session(actor, session, use=False))
    )()


@tool()
async def keep_alive(ctx: Ctx, session: str) -> SessionOut:
    """Activity now: the idle clocks start again, and a frozen session resumes. Call it
    when you will be away a while and want the session as you left it."""
    actor = await actor_of(ctx)
    return await database_sync_to_async(
        lambda: SessionOut.of(actions.keep_alive(access_session(actor, session), actor))
    )()


@tool()
async def commit_session_changes(
    ctx: Ctx, session: str, message: str | None = None, paths: list[str] | None = None
) -> SessionCommitOut:
    """Commit what you changed in the session's /workspace on its branch (all of it, or
    only `paths`): merged with what the branch got meanwhile, never undoing it. A file
    both changed is refused (error merge_conflict, with the paths): make the session's
    copy right, or leave it out with `paths`. Files holding a granted secret's value are
    withheld (listed). The answer names the commit and the files; the session keeps
    going on the merged files. Needs workspace:write."""
    actor = await actor_of(ctx)

    def ask() -> int:
        found = access_session(actor, session)
        actor.require_scope("workspace:write")
        if paths is not None and len(paths) > MAX_PATHS:
            # The API's body holds at most as many (SessionCommitIn): the same bound here.
            raise Invalid(
                f"Give at most {MAX_PATHS} paths (folders count as one); leave paths out "
                "to commit every change.",
                {"field": "paths", "maximum": MAX_PATHS},
            )
        return changes.ask_read(found).pk

    def commit(pk: int) -> SessionCommitOut:
        done = changes.read_result(pk)
        result = changes.commit(done, actor, message, paths)
        return SessionCommitOut.of(result, done.session)

    return await with_read(session, ask, commit, settings.SESSION_READ_WAIT_S)


@tool()
async def close_session(ctx: Ctx, session: str, delete: bool = False) -> SessionOut:
    """Stop the session: its uncommitted files stay (until deleted), everything else in
    its container goes. With delete, its files go too. Commit what you want to keep
    first (commit_session_changes)."""
    actor = await actor_of(ctx)

    def close() -> SessionOut:
        # Stopping or deleting it is a use of it, as an exec is (docs/security.md 35).
        found = access_session(actor, session)
        done = (
            actions.delete_session(found, actor) if delete else actions.stop_session(found, actor)
        )
        return SessionOut.of(done)

    return await database_sync_to_async(close)()
