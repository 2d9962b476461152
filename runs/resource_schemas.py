"""The contract of what runs draw on beside a run: a workspace's secrets and dependency
caches, and its team's usage against its quotas, as the JSON API answers them
(core.schemas). A run itself: runs.schemas."""

from pydantic import ConfigDict, Field

from core.schemas import In, Out, Timestamp
from runs.models import DepCache, Secret

# -- secrets ----------------------------------------------------------------------------


class SecretIn(In):
    # The byte limit (MAX_VALUE_BYTES) is checked by the action, which names it.
    model_config = ConfigDict(json_schema_extra={"examples": [{"value": "s3cret"}]})

    value: str = Field(max_length=1 << 20)


class SecretOut(Out):
    """A secret's name and dates: never its value."""

    name: str
    created_at: Timestamp
    updated_at: Timestamp
    created_by: str | None

    @classmethod
    def of(cls, secret: Secret) -> "SecretOut":
        return cls(
            name=secret.name,
            created_at=secret.created_at.isoformat(),
            updated_at=secret.updated_at.isoformat(),
            created_by=secret.created_by.username if secret.created_by else None,
        )


# -- dependency caches -----------------------------------------------------------------


class BuiltFrom(Out):
    ref: str
    commit: str


class CacheOut(Out):
    id: str
    key: str
    image_id: str
    size_bytes: int
    created_at: Timestamp
    last_used_at: Timestamp
    built_by: str | None
    built_from: BuiltFrom | None = Field(description="the branch and commit that filled it")
    in_use: bool = Field(description="an active run has it mounted: it cannot be dropped yet")

    @classmethod
    def of(cls, cache: DepCache, in_use: bool) -> "CacheOut":
        built = cache.built_by
        return cls(
            id=cache.public_id,
            key=cache.key,
            image_id=cache.image_id,
            size_bytes=cache.size_bytes,
            created_at=cache.created_at.isoformat(),
            last_used_at=cache.last_used_at.isoformat(),
            built_by=built.public_id if built else None,
            # Shared across branches: say which one (and commit) filled it.
            built_from=BuiltFrom(ref=built.ref, commit=built.commit) if built else None,
            in_use=in_use,
        )


class CachesOut(Out):
    caches: list[CacheOut] = Field(description="most recently used first")
    workspace_bytes: int
    total_bytes: int = Field(description="every cache of this instance")
    limit_bytes: int = Field(description="past it, the least recently used are evicted")


# -- the team's usage ------------------------------------------------------------------


class RunsUsage(Out):
    running: int
    max_concurrent: int
    queued: int
    max_queued: int


class LiveUsage(Out):
    live: int
    max_concurrent: int


class CpuUsage(Out):
    seconds_today: float
    max_per_day: int | None
    resets_at: Timestamp


class HostUsage(Out):
    slots: int
    busy: int


class UsageOut(Out):
    team: str
    runs: RunsUsage
    previews: LiveUsage | None = Field(
        None, description="live previews (counted by the previews app, when installed)"
    )
    sessions: LiveUsage | None = Field(
        None, description="live sessions, frozen ones included (the team's session policy)"
    )
    cpu: CpuUsage
    host: HostUsage
