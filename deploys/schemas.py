"""The contract of deploys: a deploy request and what is live, as the JSON API and the
MCP tools both answer them (core.schemas)."""

from datetime import datetime
from typing import Any

from pydantic import ConfigDict, Field

from accounts.schemas import RequestedBy
from core.links import absolute
from core.schemas import In, Out, Timestamp
from deploys.actions import release_url
from deploys.models import DeployRequest, Release, Route

# -- requests ---------------------------------------------------------------------------


class DeployIn(In):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"ref": "main", "note": "Ship the new greeting"}]}
    )

    ref: str | None = Field(None, max_length=200)
    note: str = Field("", max_length=5000, description="for the reviewer")


# -- a deploy request -------------------------------------------------------------------


class DeployTimings(Out):
    created_at: Timestamp | None
    approved_at: Timestamp | None
    building_at: Timestamp | None
    built_at: Timestamp | None
    releasing_at: Timestamp | None
    live_at: Timestamp | None
    ended_at: Timestamp | None


class DeployOut(Out):
    id: str
    workspace: str
    ref: str
    commit: str
    note: str
    state: str = Field(
        description="requested (waiting for a human reviewer), approved, "
        "rejected, cancelled, building, releasing, live, failed, "
        "superseded or rolled_back"
    )
    reason: str | None
    message: str | None
    requested_by: RequestedBy
    approvals: list[str] = Field(description="who approved it")
    approvals_required: int
    build_run: str | None
    release: int | None = Field(description="the number of the release it made")
    url: str = Field(description="the page where a human reviewer approves it")
    release_url: str
    timings: DeployTimings

    @classmethod
    def of(cls, deploy: DeployRequest, port: str = "") -> "DeployOut":
        return cls.model_validate(_deploy_fields(deploy, port))


def _deploy_fields(deploy: DeployRequest, port: str) -> dict[str, Any]:
    def iso(value: datetime | None) -> str | None:
        return value.isoformat() if value else None

    release = deploy.releases.order_by("-number").first()
    return {
        "id": deploy.public_id,
        "workspace": deploy.workspace.slug,
        "ref": deploy.ref,
        "commit": deploy.commit,
        "note": deploy.note,
        "state": deploy.state,
        "reason": deploy.reason or None,
        "message": deploy.message or None,
        "requested_by": RequestedBy.of(deploy.requested_by, deploy.token),
        "approvals": [a.user.username for a in deploy.approvals.select_related("user")],
        "approvals_required": deploy.workspace.team.approvals_required,
        "build_run": deploy.build_run.public_id if deploy.build_run else None,
        "release": release.number if release else None,
        "url": absolute(
            f"/t/{deploy.workspace.team.slug}/w/{deploy.workspace.slug}/deploys/{deploy.public_id}/"
        ),
        "release_url": release_url(deploy.workspace, port),
        "timings": {k: iso(getattr(deploy, k)) for k in DeployTimings.model_fields},
    }


class AgentDeploy(DeployOut):
    """The deploy request as an agent gets it over MCP: `review_url` names the page
    to send its person to."""

    review_url: str = Field(description="the page where a human reviewer approves it")

    @classmethod
    def of_deploy(cls, deploy: DeployRequest) -> "AgentDeploy":
        fields = _deploy_fields(deploy, "")
        return cls.model_validate({**fields, "review_url": fields["url"]})


# -- what is live -----------------------------------------------------------------------


class LiveRelease(Out):
    release: int
    commit: str
    deploy: str
    since: datetime
    approved_by: list[str]
    restored_at: datetime | None
    rollback_of: int | None
    state: str | None = Field(
        description="its process: starting, ready, crashed, failed or stopped (the "
        "route stays on it while it is not ready; `reason` and `message` say why)"
    )
    reason: str | None
    message: str | None


class ReleaseOut(Out):
    live: LiveRelease | None = Field(description="none before the first deploy went live")
    url: str

    @classmethod
    def of(cls, route: Route | None, url: str) -> "ReleaseOut":
        if route is None:
            return cls(live=None, url=url)
        release: Release = route.release
        process = release.process
        return cls(
            live=LiveRelease(
                release=release.number,
                commit=release.commit,
                deploy=release.request.public_id,
                since=route.switched_at,
                approved_by=[
                    a.user.username for a in release.request.approvals.select_related("user")
                ],
                restored_at=release.restored_at,
                rollback_of=release.rollback_of.number if release.rollback_of else None,
                state=process.state if process else None,
                reason=(process.reason or None) if process else None,
                message=(process.message or None) if process else None,
            ),
            url=url,
        )
