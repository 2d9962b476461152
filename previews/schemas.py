"""The contract of previews: a preview, its link and its log, as the JSON API and the
MCP tools both answer them (core.schemas)."""

from datetime import datetime
from typing import Any, ClassVar

from pydantic import ConfigDict, Field

from accounts.schemas import RequestedBy
from core.links import absolute
from core.schemas import In, Out, Timestamp
from logs import logstore
from previews.models import Preview, PreviewState
from runs.schemas import EgressOut, LogPage, SetupOut
from sessions.persistence import statement
from sessions.schemas import PersistenceOut

# -- requests ---------------------------------------------------------------------------


class SessionPreviewIn(In):
    model_config = ConfigDict(json_schema_extra={"examples": [{"port": 8080}]})

    port: int = Field(ge=1, le=65535, description="where the app listens in the session")
    health_path: str | None = Field(None, max_length=500, description="default: /")


class PreviewIn(In):
    model_config = ConfigDict(json_schema_extra={"examples": [{"ref": "main", "follow": True}]})

    ref: str | None = Field(None, max_length=200)
    follow: bool = Field(False, description="restart on each new commit of the branch")
    idle_timeout_s: int | None = Field(None, ge=1, le=7 * 24 * 3600)


class PublicIn(In):
    model_config = ConfigDict(json_schema_extra={"examples": [{"public": False}]})

    public: bool


# -- a preview --------------------------------------------------------------------------


class PreviewHealth(Out):
    last_status: int | None
    checked_at: Timestamp | None


class PreviewIdle(Out):
    timeout_s: int | None
    last_request_at: Timestamp | None
    idle_s: int | None


class PreviewTimings(Out):
    queued_at: Timestamp | None
    hydrated_at: Timestamp | None
    setup_done_at: Timestamp | None
    process_started_at: Timestamp | None
    ready_at: Timestamp | None
    ended_at: Timestamp | None


class PreviewOut(Out):
    id: str
    workspace: str
    ref: str
    commit: str
    follow: bool
    command: str
    port: int
    health_path: str
    state: str = Field(description="starting, ready, failed, stopped or crashed")
    reason: str | None
    message: str | None = Field(description="why it is not up, and what to do")
    exit_code: int | None
    public: bool
    url: str = Field(description="the preview's own address (a browser needs a link)")
    health: PreviewHealth
    idle: PreviewIdle
    timings: PreviewTimings
    time_until_usable_s: float | None
    run: str | None = Field(description="its current process's run")
    setup: SetupOut | None
    runtime: str | None
    isolation: dict[str, Any] = Field(description="as a run's")
    network: dict[str, Any] = Field(description="as a run's")
    egress: EgressOut | None
    warnings: list[str]
    restarts: int
    log_url: str
    requested_by: RequestedBy
    created_at: Timestamp | None
    session: str | None = Field(
        description="a preview of a session: the session whose app it serves (its life "
        "is the session's)"
    )
    persistence: PersistenceOut | None = Field(
        description="a preview of a session: what survives each stop of the session, "
        "said precisely (as the session's own answers say)"
    )

    @classmethod
    def of(cls, preview: Preview, port: str = "") -> "PreviewOut":
        return cls.model_validate(_preview_fields(preview, port))


def _preview_fields(preview: Preview, port: str) -> dict[str, Any]:
    def iso(value: datetime | None) -> str | None:
        return value.isoformat() if value else None

    run = preview.run
    idle = preview.idle_for() if preview.state == PreviewState.READY else None
    timings = {
        "queued_at": iso(run.queued_at) if run else None,
        "hydrated_at": iso(run.hydrated_at) if run else None,
        "setup_done_at": iso(run.setup_done_at) if run else None,
        "process_started_at": iso(run.process_started_at) if run else None,
        "ready_at": iso(preview.ready_at),
        "ended_at": iso(preview.ended_at),
    }
    usable = (
        (preview.ready_at - run.queued_at).total_seconds() if run and preview.ready_at else None
    )
    return {
        "id": preview.public_id,
        "workspace": preview.workspace.slug,
        "ref": preview.ref,
        "commit": preview.commit,
        "follow": preview.follow,
        "command": preview.command,
        "port": preview.port,
        "health_path": preview.health_path,
        "state": preview.state,
        "reason": preview.reason or None,
        "message": preview.message or None,
        "exit_code": preview.exit_code,
        "public": preview.public,
        "url": preview.url(port),
        "health": {
            "last_status": preview.last_health_status,
            "checked_at": iso(preview.last_health_at),
        },
        "idle": {
            "timeout_s": preview.idle_timeout_s,
            "last_request_at": iso(preview.last_request_at),
            "idle_s": round(idle.total_seconds()) if idle else None,
        },
        "timings": timings,
        "time_until_usable_s": usable,
        "run": run.public_id if run else None,
        "setup": SetupOut.of(run) if run else None,
        "runtime": run.runtime if run else None,
        "isolation": run.isolation if run else {},
        "network": run.network if run else {},
        "egress": EgressOut.of(run) if run else None,
        "warnings": run.warnings if run else [],
        "restarts": preview.restarts,
        "log_url": absolute(f"/api/v1/previews/{preview.public_id}/logs"),
        "requested_by": RequestedBy.of(preview.requested_by, preview.token),
        "created_at": iso(preview.created_at),
        "session": preview.session.public_id if preview.session else None,
        "persistence": statement(preview.session) if preview.session else None,
    }


class AgentPreview(PreviewOut):
    """The preview as an agent gets it over MCP: with a link to open it and the tail
    of its process's log."""

    TAIL: ClassVar[int] = 50

    link: str | None = Field(description="a short-lived, single-use URL that opens it")
    log_tail: list[str] = Field(description="the last 50 lines of its process log")

    @classmethod
    def of_preview(cls, preview: Preview, link: str | None = None) -> "AgentPreview":
        tail: list[str] = []
        if preview.run is not None:
            count = logstore.count(preview.run.public_id)
            tail = [
                e["text"]
                for e in logstore.read(preview.run.public_id, max(0, count - cls.TAIL), cls.TAIL)
            ]
        return cls.model_validate({**_preview_fields(preview, ""), "link": link, "log_tail": tail})


# -- what hangs off a preview -----------------------------------------------------------


class LinkOut(Out):
    url: str
    expires_at: Timestamp
    single_use: bool


class PreviewLogPage(LogPage):
    run: str | None = Field(
        description="the process the log is of: a restart replaces it (its log starts at 0)"
    )


class FetchOut(Out):
    """A page fetched from a preview through the preview gateway (MCP `fetch_preview`)."""

    BODY_CAP: ClassVar[int] = 256 * 1024

    status: int
    headers: dict[str, str]
    body: str = Field(description="the body as text (UTF-8, invalid bytes replaced)")
    truncated: bool = Field(description="true when the body passed 262144 bytes")
