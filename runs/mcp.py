"""MCP tools onto runs: run a command and get its contract back in one call, read its
log, cancel it. Waits are asynchronous (runs.waiting), so one agent's wait holds no
thread of Django's."""

from typing import Any

from channels.db import database_sync_to_async
from pydantic import BaseModel, Field

from accounts.auth import actor_of
from core.mcp import Ctx, tool
from runs import actions, logstore
from runs.access import access_run
from runs.logs_api import log_page
from runs.models import Run
from runs.waiting import MAX_WAIT_S, wait_for_end
from workspaces.mcp import workspace_for

TAIL = 200


class LogEntry(BaseModel):
    seq: int
    stream: str
    text: str


class RunOut(BaseModel):
    id: str
    workspace: str
    commit: str
    command: str
    state: str = Field(
        description="queued, preparing, running, then succeeded, failed, "
        "timed_out, cancelled, oom_killed, error or lost"
    )
    reason: str | None
    message: str | None = Field(description="what happened and what to do next")
    exit_code: int | None
    done: bool
    timings: dict[str, Any]
    queue: dict[str, Any] | None = Field(
        description="while it waits for a slot: its position and why"
    )
    log_tail: list[LogEntry] = Field(description=f"the last {TAIL} log entries so far")
    cursor: int = Field(
        description="the seq of the last entry: read_run_log(after=cursor) gets what comes next"
    )
    changes: dict[str, Any] | None
    artifacts: list[dict[str, Any]]
    web_url: str


class LogOut(BaseModel):
    entries: list[LogEntry]
    next: int
    complete: bool = Field(description="true once the run ended and every entry is here")


def run_out(run: Run) -> RunOut:
    summary = actions.run_summary(run)
    count = logstore.count(run.public_id)
    tail = logstore.read(run.public_id, max(0, count - TAIL), TAIL)
    return RunOut(
        id=run.public_id,
        workspace=run.workspace.slug,
        commit=run.commit,
        command=run.command,
        state=run.state,
        reason=run.reason or None,
        message=run.message or None,
        exit_code=run.exit_code,
        done=not run.is_active,
        timings=summary["timings"],
        queue=summary["queue"],
        log_tail=[LogEntry(seq=e["seq"], stream=e["stream"], text=e["text"]) for e in tail],
        cursor=tail[-1]["seq"] if tail else count,
        changes=run.changes,
        artifacts=summary["artifacts"],
        web_url=f"/t/{run.workspace.team.slug}/w/{run.workspace.slug}/runs/{run.public_id}/",
    )


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
) -> RunOut:
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
    return await database_sync_to_async(lambda: run_out(_reload(public_id)))()


@tool()
async def get_run(ctx: Ctx, run_id: str, wait_seconds: int = 0) -> RunOut:
    """A run's contract and the last 200 log lines; with wait_seconds (max 120), first
    waits for it to end. Instant otherwise."""
    actor = await actor_of(ctx)
    run = await database_sync_to_async(lambda: access_run(actor, run_id))()
    await wait_for_end(run.public_id, max(0, min(wait_seconds, MAX_WAIT_S)))
    return await database_sync_to_async(lambda: run_out(_reload(run.public_id)))()


@tool()
async def read_run_log(ctx: Ctx, run_id: str, after: int = 0, limit: int = 1000) -> LogOut:
    """Log entries after the cursor `after` (exclusive; 0 for the start), oldest first,
    at most `limit` (max 5000). `complete` says the run ended and nothing follows.
    Instant."""
    actor = await actor_of(ctx)

    def page() -> LogOut:
        run = access_run(actor, run_id)
        got = log_page(run, max(0, after), limit)
        return LogOut(
            entries=[LogEntry(**e) for e in got["entries"]],
            next=got["next"],
            complete=got["complete"],
        )

    return await database_sync_to_async(page)()


@tool()
async def cancel_run(ctx: Ctx, run_id: str) -> RunOut:
    """Stop a run: a queued one ends at once, a running one gets SIGTERM, then SIGKILL
    after the grace period. Returns at once; get_run(wait_seconds=10) shows the end."""
    actor = await actor_of(ctx)

    def cancel() -> RunOut:
        run = access_run(actor, run_id)
        actions.cancel_run(run, actor)
        return run_out(_reload(run.public_id))

    return await database_sync_to_async(cancel)()
