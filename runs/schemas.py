"""The contract of runs: a run, its log, egress and artifacts, as the JSON API and the
MCP tools both answer them (core.schemas). A workspace's secrets and caches, and the
team's usage: runs.resource_schemas."""

from datetime import datetime
from typing import Any, ClassVar

from django.utils import timezone
from pydantic import ConfigDict, Field

from accounts.schemas import RequestedBy
from core.links import absolute
from core.schemas import In, Out, Timestamp
from logs import logstore
from runs import quotas
from runs.models import EgressEvent, Run
from runs.network_failure import NetworkFailure
from workspaces.models import ContractReview
from workspaces.schemas import DiffStats

# -- requests ---------------------------------------------------------------------------


class RunIn(In):
    # Anything not listed (privileged, binds, network_mode, cap_add, user, ...) is a 422,
    # never passed on to the engine.
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"command": "python -m pytest -q", "timeout_s": 120}]}
    )

    command: str = Field(min_length=1, max_length=100_000)
    ref: str | None = Field(None, max_length=200)
    # Bounds are checked by the action (sandbox.limits): a 422 naming the bound, the same
    # on every door.
    timeout_s: int | None = None
    env: dict[str, str] = Field(default_factory=dict, max_length=100)
    runtime: str | None = Field(None, pattern="^(runc|gvisor)$")
    secrets: list[str] = Field(default_factory=list, max_length=50)
    commit_changes: bool = False


class RerunIn(In):
    model_config = ConfigDict(json_schema_extra={"examples": [{"env": {"DEBUG": "1"}}]})

    env: dict[str, str] = Field(default_factory=dict, max_length=100)


# -- a run ------------------------------------------------------------------------------


class QueueOut(Out):
    position: int
    waiting_for: str = Field(description="team_limit, host_busy or admission")
    message: str


class RunTimings(Out):
    queued_at: Timestamp | None
    admitted_at: Timestamp | None
    started_at: Timestamp | None
    hydrated_at: Timestamp | None
    setup_done_at: Timestamp | None
    process_started_at: Timestamp | None
    ready_at: Timestamp | None
    finished_at: Timestamp | None


class LogInfo(Out):
    entries: int
    bytes: int
    expired: bool


class EgressEventOut(Out):
    kind: str = Field(description="egress_allowed or egress_denied")
    phase: str
    method: str
    host: str
    port: int
    address: str
    reason: str
    bytes_up: int
    bytes_down: int
    started_at: datetime
    ended_at: datetime | None
    count: int = Field(description="connections this record stands for")

    @classmethod
    def of(cls, event: EgressEvent) -> "EgressEventOut":
        return cls.model_validate(event.as_dict())


class EgressOut(Out):
    """What went out: totals over every connection tried."""

    offered_at: Timestamp | None
    connections: int
    denied: int
    bytes_up: int
    bytes_down: int
    events_url: str

    @classmethod
    def of(cls, run: Run) -> "EgressOut | None":
        """None for a run with no egress policy."""
        return cls(**cls._totals(run)) if run.network.get("mode") == "proxy" else None

    @staticmethod
    def _totals(run: Run) -> dict[str, Any]:
        return {
            "offered_at": run.egress_offered_at.isoformat() if run.egress_offered_at else None,
            "connections": run.egress_connections,
            "denied": run.egress_denied,
            "bytes_up": run.egress_bytes_up,
            "bytes_down": run.egress_bytes_down,
            "events_url": absolute(f"/api/v1/runs/{run.public_id}/egress"),
        }


class EgressWithEvents(EgressOut):
    events: list[EgressEventOut] = Field(description="the first recorded connections")

    @classmethod
    def with_events(cls, run: Run, events: int) -> "EgressWithEvents | None":
        if run.network.get("mode") != "proxy":
            return None
        return cls(
            **cls._totals(run),
            events=[EgressEventOut.of(e) for e in run.egress_events.all()[:events]],
        )


class SetupOut(Out):
    command: str
    cache_key: list[str]
    key: str | None
    cache: str | None
    skipped: bool
    status: str

    @classmethod
    def of(cls, run: Run) -> "SetupOut | None":
        if not run.setup.get("command"):
            return None
        hit = run.setup.get("hit")
        return cls(
            command=run.setup["command"],
            cache_key=run.setup.get("cache_key", []),
            key=run.setup.get("key"),
            cache=run.setup.get("cache"),
            skipped=hit is True,
            status={
                True: "skipped: the dependency cache had this key",
                False: "ran: no cache had this key yet",
                None: "not decided yet",
            }[hit],
        )


class ArtifactOut(Out):
    path: str
    size: int
    sha256: str
    url: str


class RefusedOut(Out):
    path: str
    why: str


class WithheldOut(Out):
    path: str
    secrets: list[str] = Field(description="the secrets whose values it holds")


class RunChanges(Out):
    """What the run changed in /workspace (runs.outputs)."""

    # Kept as written when the run ended: a record of an older version keeps its keys.
    model_config = ConfigDict(extra="allow")

    added: list[str] = []
    modified: list[str] = []
    deleted: list[str] = []
    renamed: list[dict[str, str]] = Field([], description='{"from": path, "to": path}')
    binary: list[str] = []
    stats: DiffStats = DiffStats(files=0, additions=0, deletions=0)
    diff: str = ""
    truncated: bool = False
    skipped: list[RefusedOut] = []
    skipped_count: int = 0
    withheld: list[WithheldOut] = []


class ChangesCommit(Out):
    sha: str
    branch: str


class ContractDecision(Out):
    id: str
    state: str
    source: str
    decided_by: str | None
    self_approved: bool
    url: str

    @classmethod
    def of(cls, review: ContractReview | None) -> "ContractDecision | None":
        if review is None:
            return None
        return cls(
            id=review.public_id,
            state=review.state,
            source=review.source,
            decided_by=review.decided_by.get_username() if review.decided_by else None,
            self_approved=review.self_approved,
            url=absolute(review.url),
        )


class RunOut(Out):
    """The run object: inputs, state, outcome and timings."""

    id: str
    workspace: str
    ref: str
    commit: str
    command: str
    state: str = Field(
        description="queued, preparing, running, then succeeded, failed, "
        "timed_out, cancelled, oom_killed, error or lost"
    )
    reason: str | None
    message: str | None = Field(description="what happened and what to do next")
    exit_code: int | None
    image: str
    image_id: str | None
    runtime: str
    limits: dict[str, Any] = Field(description="the limits it ran under (sandbox.limits)")
    network: dict[str, Any] = Field(description="its egress policy (sandbox.egress.policy)")
    env: list[str] = Field(description="the names of the variables it was given")
    isolation: dict[str, Any] = Field(
        description="what the engine applied, read back from the container"
    )
    warnings: list[str]
    requested_by: RequestedBy
    queue: QueueOut | None = Field(description="while it waits for a slot: its place and why")
    cpu_seconds: float
    timings: RunTimings
    log: LogInfo
    log_url: str
    egress: EgressOut | None
    secrets: list[str]
    setup: SetupOut | None
    network_failure: NetworkFailure | None = Field(description="it failed on the network")
    artifacts: list[ArtifactOut]
    artifacts_refused: list[RefusedOut]
    changes: RunChanges | None
    changes_commit: ChangesCommit | None
    commit_changes: bool
    rerun_of: str | None
    contract_review: ContractDecision | None = Field(
        description="the approved sandbox contract it ran under, and who approved it"
    )
    outputs_expired_at: Timestamp | None
    now: Timestamp

    @classmethod
    def of(cls, run: Run) -> "RunOut":
        return cls.model_validate(_run_fields(run))


class RunDetail(RunOut):
    """A run with its first egress events (`GET /runs/{id}`)."""

    egress: EgressWithEvents | None

    @classmethod
    def of_run(cls, run: Run, events: int) -> "RunDetail":
        return cls.model_validate(
            {**_run_fields(run), "egress": EgressWithEvents.with_events(run, events)}
        )


def _run_fields(run: Run) -> dict[str, Any]:
    def iso(value: datetime | None) -> str | None:
        return value.isoformat() if value else None

    return {
        "id": run.public_id,
        "workspace": run.workspace.slug,
        "ref": run.ref,
        "commit": run.commit,
        "command": run.command,
        "state": run.state,
        "reason": run.reason or None,
        "message": run.message or None,
        "exit_code": run.exit_code,
        "image": run.image,
        "image_id": run.image_id or None,
        "runtime": run.runtime,
        "limits": run.limits,
        "network": run.network,
        "env": run.env_names,
        "isolation": run.isolation,
        "warnings": run.warnings,
        "requested_by": RequestedBy.of(run.requested_by, run.token),
        "queue": quotas.queue_position(run),
        "cpu_seconds": round(run.cpu_seconds, 2),
        "timings": {k: iso(getattr(run, k)) for k in RunTimings.model_fields},
        "log": {
            "entries": run.log_entries,
            "bytes": run.log_bytes,
            "expired": run.outputs_expired_at is not None,
        },
        "log_url": absolute(f"/api/v1/runs/{run.public_id}/logs"),
        "egress": EgressOut.of(run),
        "secrets": run.secret_names,
        "contract_review": ContractDecision.of(run.contract_review),
        "setup": SetupOut.of(run),
        "network_failure": NetworkFailure.of(run),
        "artifacts": [
            {**a, "url": absolute(f"/api/v1/runs/{run.public_id}/artifacts/{a['path']}")}
            for a in run.artifacts
        ]
        if not run.outputs_expired_at
        else [],
        "artifacts_refused": run.artifacts_refused,
        "changes": run.changes,
        "changes_commit": (
            {"sha": run.changes_commit, "branch": run.changes_branch}
            if run.changes_commit
            else None
        ),
        "commit_changes": run.commit_changes,
        "rerun_of": run.rerun_of.public_id if run.rerun_of else None,
        "outputs_expired_at": iso(run.outputs_expired_at),
        "now": timezone.now().isoformat(),
    }


# -- what hangs off a run ---------------------------------------------------------------


class LogEntry(Out):
    seq: int
    stream: str
    text: str


class LogPage(Out):
    entries: list[LogEntry]
    next: int = Field(description="the cursor for the following page (`after`)")
    complete: bool = Field(description="true once the run ended and every entry is here")


class EgressPage(Out):
    policy: dict[str, Any] = Field(description="the run's egress policy")
    summary: EgressOut | None
    events: list[EgressEventOut] = Field(description="every connection kept")


class ArtifactsOut(Out):
    artifacts: list[ArtifactOut]
    refused: list[RefusedOut]
    expired_at: Timestamp | None


class AgentRun(RunOut):
    """The run as an agent gets it over MCP: the run object, whether it is done, and
    its log's tail with the cursor to read on from."""

    TAIL: ClassVar[int] = 200

    done: bool
    log_tail: list[LogEntry] = Field(description="the last 200 log entries so far")
    cursor: int = Field(
        description="the seq of the last entry: read_run_log(after=cursor) gets what comes next"
    )
    web_url: str = Field(description="where a person sees it in Berth")

    @classmethod
    def of_run(cls, run: Run) -> "AgentRun":
        count = logstore.count(run.public_id)
        tail = logstore.read(run.public_id, max(0, count - cls.TAIL), cls.TAIL)
        return cls.model_validate(
            {
                **_run_fields(run),
                "done": not run.is_active,
                "log_tail": tail,
                "cursor": tail[-1]["seq"] if tail else count,
                "web_url": absolute(
                    f"/t/{run.workspace.team.slug}/w/{run.workspace.slug}/runs/{run.public_id}/"
                ),
            }
        )
