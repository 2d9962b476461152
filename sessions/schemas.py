"""The session contract: requests and answers of every door (API, MCP, pages)."""

from datetime import UTC, datetime
from typing import Any

from pydantic import ConfigDict, Field

from accounts.schemas import RequestedBy
from core.links import absolute
from core.schemas import In, Out, Timestamp
from logs import logstore
from runs.schemas import RefusedOut, RunChanges, WithheldOut
from sessions.changes import SessionCommit
from sessions.models import Exec, Session, SessionState
from sessions.persistence import statement
from workspaces.schemas import FollowerOut

MAX_OUTPUT_ENTRIES = 200  # an exec's answer holds at most its last this many lines


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


class SessionIn(In):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"ref": "main", "idle_freeze_s": 300}]}
    )

    ref: str | None = Field(None, max_length=200, description="the branch it follows")
    runtime: str | None = Field(None, pattern="^(runc|gvisor)$")
    # At most the team's maxima (checked by the action, which names them).
    idle_freeze_s: int | None = Field(None, ge=1)
    idle_stop_s: int | None = Field(None, ge=1)
    lifetime_s: int | None = Field(None, ge=1)
    retention_s: int | None = Field(None, ge=0)


class ExecIn(In):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"command": "python -m pytest -q", "wait_seconds": 30}]}
    )

    command: str = Field(min_length=1, max_length=100_000)
    wait_seconds: int = Field(
        30, ge=0, le=120, description="answer with the output if it ends within this"
    )
    detach: bool = Field(False, description="answer at once with the exec's handle")
    timeout_s: int | None = None
    cwd: str = Field("/workspace", max_length=500)
    env: dict[str, str] = Field(default_factory=dict, max_length=100)
    secrets: list[str] = Field(default_factory=list, max_length=50)


class SessionCommitIn(In):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"message": "Add the report", "paths": ["report.md"]}]}
    )

    message: str | None = Field(None, max_length=10_000)
    paths: list[str] | None = Field(
        None,
        max_length=1000,
        description="commit only these files or folders (default: every change)",
    )


class KillIn(In):
    force: bool = Field(False, description="SIGKILL at once instead of SIGTERM first")


class PersistenceItem(Out):
    where: str
    survives: str
    kept_now: bool = Field(description="whether the engine holds it at this moment")


class PersistenceOut(Out):
    """What survives each stop of this session, said precisely."""

    commits: PersistenceItem
    uncommitted_files: PersistenceItem
    dependency_cache: PersistenceItem
    home_and_tmp: PersistenceItem
    processes_and_memory: PersistenceItem


class SessionTimers(Out):
    idle_freeze_s: int
    idle_stop_s: int
    lifetime_s: int
    retention_s: int


class SessionTimes(Out):
    created_at: Timestamp
    started_at: Timestamp | None
    ready_at: Timestamp | None
    last_active_at: Timestamp
    frozen_at: Timestamp | None
    stopped_at: Timestamp | None
    deleted_at: Timestamp | None
    freezes_at: Timestamp | None = Field(description="if nothing happens before")
    stops_at: Timestamp | None = Field(description="idle stop or lifetime, the earlier")
    deleted_after: Timestamp | None = Field(description="a stopped session's files go then")


class SessionOut(Out):
    """A session: state, clocks, what survives, and what to call next."""

    id: str
    workspace: str
    ref: str
    base_commit: str
    state: str = Field(
        description="starting, ready, freezing, frozen, stopping, stopped, deleted, failed or lost"
    )
    reason: str | None
    message: str | None
    runtime: str | None = Field(description="what applied (its current start's run)")
    run: str | None = Field(description="the run of its current start (its container)")
    starts: int
    timers: SessionTimers
    times: SessionTimes
    persistence: PersistenceOut
    secrets: list[str] = Field(description="secrets its execs were granted")
    deps_stale: bool = Field(
        description="a file of the dependency cache's key changed on its branch since it "
        "started: /deps is out of date until it starts again"
    )
    conflicts: list[str] = Field(
        description="files the branch changed that the session had changed too, left as "
        "the session has them; a commit of its changes refuses to undo the branch's"
    )
    requested_by: RequestedBy
    web_url: str = Field(description="its page in Berth, where a person sees it")
    next: str = Field(description="the next useful call")

    @classmethod
    def of(cls, session: Session) -> "SessionOut":
        run = session.run
        idle_freeze = idle_stop = None
        if session.state == SessionState.READY:
            idle_freeze = session.last_active_at.timestamp() + session.idle_freeze_s
        if session.is_live:
            idle_stop = session.last_active_at.timestamp() + session.idle_stop_s
        stops = [t for t in (idle_stop, _ts(session.expires_at)) if t is not None]
        return cls(
            id=session.public_id,
            workspace=session.workspace.slug,
            ref=session.ref,
            base_commit=session.base_commit,
            state=session.state,
            # While it stops: why it was asked to.
            reason=session.reason or session.stop_reason or None,
            message=session.message or None,
            runtime=run.runtime if run else session.runtime or None,
            run=run.public_id if run else None,
            starts=session.starts,
            timers=SessionTimers(
                idle_freeze_s=session.idle_freeze_s,
                idle_stop_s=session.idle_stop_s,
                lifetime_s=session.lifetime_s,
                retention_s=session.retention_s,
            ),
            times=SessionTimes(
                created_at=session.created_at.isoformat(),
                started_at=_iso(session.started_at),
                ready_at=_iso(session.ready_at),
                last_active_at=session.last_active_at.isoformat(),
                frozen_at=_iso(session.frozen_at),
                stopped_at=_iso(session.stopped_at),
                deleted_at=_iso(session.deleted_at),
                freezes_at=_from_ts(idle_freeze),
                stops_at=_from_ts(min(stops)) if stops else None,
                deleted_after=_iso(session.deleted_after)
                if session.state != SessionState.DELETED
                else None,
            ),
            persistence=PersistenceOut.model_validate(statement(session)),
            secrets=session.secret_names,
            deps_stale=session.deps_stale,
            conflicts=sorted(session.sync_conflicts or {}),
            requested_by=RequestedBy.of(session.requested_by, session.token),
            web_url=absolute(
                f"/t/{session.workspace.team.slug}/w/{session.workspace.slug}/sessions/"
                f"{session.public_id}/"
            ),
            next=next_call(session),
        )


def _ts(value: datetime | None) -> float | None:
    return value.timestamp() if value else None


def _from_ts(value: float | None) -> str | None:
    return datetime.fromtimestamp(value, UTC).isoformat() if value is not None else None


def next_call(session: Session) -> str:
    sid = session.public_id
    return {
        SessionState.STARTING: f"exec in it now (POST /api/v1/sessions/{sid}/exec): the exec "
        "runs once it is ready",
        SessionState.READY: f"exec (POST /api/v1/sessions/{sid}/exec)",
        SessionState.FREEZING: f"exec: it resumes for it (POST /api/v1/sessions/{sid}/exec)",
        SessionState.FROZEN: f"exec or keep_alive: it resumes (POST /api/v1/sessions/{sid}/exec)",
        SessionState.STOPPING: f"wait, then start it again (POST /api/v1/sessions/{sid}/start)",
        SessionState.STOPPED: f"start it again on its files (POST /api/v1/sessions/{sid}/start)",
        SessionState.FAILED: f"read its message, then start it again (POST "
        f"/api/v1/sessions/{sid}/start)",
        SessionState.LOST: f"start it again (POST /api/v1/sessions/{sid}/start)",
        SessionState.DELETED: "open a new session (POST /api/v1/workspaces/{ws}/sessions)",
    }[SessionState(session.state)]


class ExecTimings(Out):
    created_at: Timestamp
    started_at: Timestamp | None
    ended_at: Timestamp | None


class OutputLine(Out):
    seq: int
    stream: str
    text: str


class ExecOut(Out):
    """One command in a session, recorded as a run is: who, what, how it ended, its log."""

    id: str
    session: str
    command: str
    cwd: str
    detach: bool
    timeout_s: int
    state: str = Field(description="queued, running or ended")
    reason: str | None = Field(
        description="exit_zero, exit_nonzero, command_not_found, timeout, killed, "
        "oom_killed, killed_by_signal, session_stopped, not_started or lost"
    )
    message: str | None
    exit_code: int | None
    signal: int | None
    env: list[str]
    secrets: list[str]
    requested_by: RequestedBy
    timings: ExecTimings
    log_entries: int
    log_url: str
    output: list[OutputLine] = Field(
        description=f"its last lines (at most {MAX_OUTPUT_ENTRIES}); the log has them all"
    )
    output_truncated: bool
    next: str

    @classmethod
    def of(cls, row: Exec, with_output: bool = True) -> "ExecOut":
        count = logstore.count(row.public_id)
        lines: list[dict[str, Any]] = []
        if with_output and count:
            lines = logstore.read(row.public_id, max(0, count - MAX_OUTPUT_ENTRIES))
        return cls(
            id=row.public_id,
            session=row.session.public_id,
            command=row.command,
            cwd=row.cwd,
            detach=row.detach,
            timeout_s=row.timeout_s,
            state=row.state,
            reason=row.reason or None,
            message=row.message or None,
            exit_code=row.exit_code,
            signal=row.signal,
            env=row.env_names,
            secrets=row.secret_names,
            requested_by=RequestedBy.of(row.requested_by, row.token),
            timings=ExecTimings(
                created_at=row.created_at.isoformat(),
                started_at=_iso(row.started_at),
                ended_at=_iso(row.ended_at),
            ),
            log_entries=count,
            log_url=absolute(f"/api/v1/execs/{row.public_id}/logs"),
            output=[OutputLine(seq=e["seq"], stream=e["stream"], text=e["text"]) for e in lines],
            output_truncated=count > len(lines) and with_output,
            next=(
                f"read its output as it goes (GET /api/v1/execs/{row.public_id}?wait_seconds=30, "
                "or read_output)"
                if row.is_active
                else "exec the next command in the same session"
            ),
        )


class SessionPolicyIn(In):
    """A team's session maxima, all five (PUT replaces them); each at most the
    operator's ceiling (422 `over_ceiling` naming it)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "max_sessions": 4,
                    "idle_freeze_s": 300,
                    "idle_stop_s": 1800,
                    "lifetime_s": 28800,
                    "retention_s": 604800,
                }
            ]
        }
    )

    max_sessions: int = Field(ge=0, description="live sessions at once (frozen ones count)")
    idle_freeze_s: int = Field(ge=1, description="the most idle time before a freeze")
    idle_stop_s: int = Field(ge=1, description="the most idle time before a stop")
    lifetime_s: int = Field(ge=1, description="the most one start may last")
    retention_s: int = Field(ge=0, description="the most a stopped session's files are kept")


class SessionMaxima(Out):
    max_sessions: int
    idle_freeze_s: int
    idle_stop_s: int
    lifetime_s: int
    retention_s: int


class SessionPolicyOut(SessionMaxima):
    """A team's session maxima: what a session may ask for at most, and how many may
    be live at once."""

    team: str
    source: str = Field(description="team (an admin set them) or defaults (the settings')")
    live_sessions: int
    ceilings: SessionMaxima = Field(description="the most an admin may set (the operator's)")


class SessionChangesOut(Out):
    """What the session's /workspace holds against its base commit, as a run's changes."""

    session: str
    branch: str
    base_commit: str = Field(description="the branch's commit its files were last brought to")
    changes: RunChanges
    conflicts: list[str] = Field(
        description="files a write on the branch left as the session had them"
    )
    next: str

    @classmethod
    def of(cls, session: Session, base_commit: str, changes: dict[str, Any]) -> "SessionChangesOut":
        sid = session.public_id
        return cls(
            session=sid,
            branch=session.ref,
            base_commit=base_commit,
            changes=RunChanges.model_validate(changes),
            conflicts=sorted(session.sync_conflicts or {}),
            next=f"commit them on {session.ref} (POST /api/v1/sessions/{sid}/commit, or "
            "commit_session_changes)"
            if changes.get("stats", {}).get("files")
            else "exec: the session has no uncommitted changes",
        )


class SessionCommitOut(Out):
    """The session's changes as one commit on its branch, merged with what the branch
    got meanwhile; and whether the sessions following the branch have it."""

    commit: str
    branch: str
    parent: str = Field(description="the branch's head it was merged with")
    files: list[str] = Field(description="the files the commit changed")
    withheld: list[WithheldOut] = Field(
        description="files left out: they hold a granted secret's value"
    )
    skipped: list[RefusedOut] = Field(
        description="what Git cannot hold (too large, not a file), left out"
    )
    followers: list[FollowerOut]
    next: str

    @classmethod
    def of(cls, result: SessionCommit, session: Session) -> "SessionCommitOut":
        return cls(
            commit=result.sha,
            branch=result.branch,
            parent=result.parent,
            files=result.files,
            withheld=[WithheldOut.model_validate(w) for w in result.withheld],
            skipped=[RefusedOut.model_validate(w) for w in result.skipped],
            followers=[FollowerOut.of(f) for f in result.followers],
            next=f"run or preview commit {result.sha[:12]}, or go on in the session "
            f"({session.public_id}): it has the merged files",
        )
