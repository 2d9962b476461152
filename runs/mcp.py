"""MCP tools onto runs: run a command and get its contract back in one call, read its
log, cancel it. Waits are asynchronous (runs.waiting), so one agent's wait holds no
thread of Django's."""

from channels.db import database_sync_to_async

from accounts.auth import actor_of
from core.mcp import Ctx, tool
from runs import actions
from runs.access import access_run
from runs.logs_api import log_page
from runs.models import Run
from runs.schemas import AgentRun, LogPage
from runs.waiting import MAX_WAIT_S, wait_for_end
from workspaces.mcp import workspace_for


def _reload(public_id: str) -> Run:
    return Run.objects.select_related("workspace__team", "requested_by", "token", "rerun_of").get(
        public_id=public_id
    )


@tool()
async def run_command(
    ctx: Ctx,
    workspace: str,
    command: str,
    ref: str | None = None,
    wait_seconds: int = 30,
    timeout_s: int | None = None,
) -> AgentRun:
    """Run a shell command (`sh -c`) against a commit of the workspace (default: the
    default branch's head, pinned now) in a fresh hardened sandbox, and wait up to
    wait_seconds (default 30, max 120) for it to end. Returns the run's contract: state,
    reason, exit code, a message saying what to do next, timings and the last 200 log
    lines. Takes about a second plus the command's own time. If it is still running,
    call get_run or read_run_log(after=cursor) later."""
    actor = await actor_of(ctx)

    def start() -> str:
        w = workspace_for(actor, workspace, "run")
        return actions.start_run(w, actor, command, ref, timeout_s).public_id

    public_id = await database_sync_to_async(start)()
    await wait_for_end(public_id, max(0, min(wait_seconds, MAX_WAIT_S)))
    return await database_sync_to_async(lambda: AgentRun.of_run(_reload(public_id)))()


@tool()
async def get_run(ctx: Ctx, run_id: str, wait_seconds: int = 0) -> AgentRun:
    """A run's contract and the last 200 log lines; with wait_seconds (max 120), first
    waits for it to end. Instant otherwise."""
    actor = await actor_of(ctx)
    run = await database_sync_to_async(lambda: access_run(actor, run_id))()
    await wait_for_end(run.public_id, max(0, min(wait_seconds, MAX_WAIT_S)))
    return await database_sync_to_async(lambda: AgentRun.of_run(_reload(run.public_id)))()


@tool()
async def read_run_log(ctx: Ctx, run_id: str, after: int = 0, limit: int = 1000) -> LogPage:
    """Log entries after the cursor `after` (exclusive; 0 for the start), oldest first,
    at most `limit` (max 5000). `complete` says the run ended and nothing follows.
    Instant."""
    actor = await actor_of(ctx)

    def page() -> LogPage:
        return log_page(access_run(actor, run_id), max(0, after), limit)

    return await database_sync_to_async(page)()


@tool()
async def cancel_run(ctx: Ctx, run_id: str) -> AgentRun:
    """Stop a run: a queued one ends at once, a running one gets SIGTERM, then SIGKILL
    after the grace period. Returns at once; get_run(wait_seconds=10) shows the end."""
    actor = await actor_of(ctx)

    def cancel() -> AgentRun:
        run = access_run(actor, run_id)
        actions.cancel_run(run, actor)
        return AgentRun.of_run(_reload(run.public_id))

    return await database_sync_to_async(cancel)()
