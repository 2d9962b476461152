"""Which sessions' keeper steps have something to do now (sessions.keeper._step).

The keeper steps sessions twice a second for their clocks (lifetime, idle freeze and
stop, retention) and for what a lost signal left undone (a pending write). At rest that
was a task and two queries per session per step, most of the runner agent's CPU with
twenty idle sessions (issue 32). A session is left out of a step only where its step
would certainly do nothing: a ready one with no write pending, no exec queued or
running and no clock run out, or a stopped one before its deletion time. Every other
state (starting, freezing, frozen, stopping) is stepped as before.
"""

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from sessions.models import (
    LIVE_STATES,
    RESTARTABLE_STATES,
    Exec,
    ExecState,
    Session,
    SessionState,
    SessionSync,
    Snapshot,
    SnapshotState,
    SyncState,
)

_CLOCKS = (
    *("pk", "state", "last_active_at", "idle_freeze_s", "idle_stop_s"),
    *("started_at", "lifetime_s", "stopped_at", "retention_s"),
)


def _here() -> dict[str, Any]:
    return {"run__sandbox__host": settings.SANDBOX_HOST}


def clock_due(row: dict[str, Any], now: datetime) -> bool:
    """A ready session's lifetime or idle clocks have run out (Session.expires_at)."""
    idle = (now - row["last_active_at"]).total_seconds()
    started = row["started_at"]
    return bool(
        (started and now >= started + timedelta(seconds=row["lifetime_s"]))
        or idle >= row["idle_stop_s"]
        or idle >= row["idle_freeze_s"]
    )


def _retention_due(row: dict[str, Any], now: datetime) -> bool:
    """A stopped session's files are due to go (Session.deleted_after)."""
    stopped = row["stopped_at"]
    return bool(stopped and now >= stopped + timedelta(seconds=row["retention_s"]))


def quiet(ready: list[int]) -> set[int]:
    """Of these ready sessions, those with no write to apply and no exec queued or
    running (a busy one's step keeps its idle clock from running)."""
    if not ready:
        return set()
    pending = SessionSync.objects.filter(session__in=ready, state=SyncState.PENDING)
    busy = Exec.objects.filter(session__in=ready, state__in=(ExecState.QUEUED, ExecState.RUNNING))
    return (
        set(ready)
        - set(pending.values_list("session_id", flat=True))
        - set(busy.values_list("session_id", flat=True))
    )


def to_step() -> list[Session]:
    """The sessions of this host whose step may have something to do, as `_step` reads
    them (with their run, sandbox, workspace and team)."""
    now = timezone.now()
    rows = list(
        Session.objects.filter(state__in=(*LIVE_STATES, *RESTARTABLE_STATES), **_here()).values(
            *_CLOCKS
        )
    )
    still = quiet([r["pk"] for r in rows if r["state"] == SessionState.READY])
    wanted = [
        r["pk"]
        for r in rows
        if not (
            (r["pk"] in still and not clock_due(r, now))
            or (r["state"] in RESTARTABLE_STATES and not _retention_due(r, now))
        )
    ]
    if not wanted:
        return []
    return list(
        Session.objects.filter(pk__in=wanted).select_related("run__sandbox", "workspace__team")
    )


def waiting() -> tuple[bool, bool, bool]:
    """Whether there are (execs to hand or kill, files to sync or read, sessions to
    thaw for a door): a few light queries, before the keeper's dispatch loads any of
    them with all it needs (at rest, twice a second, it found none of each). Each looks
    at one table, on any host: the joins up to the sandbox's host tripled their cost,
    and the dispatch's own queries keep to this host (work of another host costs them a
    query that finds nothing, never a miss)."""
    execs = Exec.objects.filter(
        Q(state=ExecState.QUEUED) | Q(state=ExecState.RUNNING, kill_requested_at__isnull=False)
    )
    files = (
        SessionSync.objects.filter(state=SyncState.PENDING).exists()
        or Snapshot.objects.filter(state=SnapshotState.PENDING).exists()
    )
    resumes = Session.objects.filter(
        state__in=(SessionState.FREEZING, SessionState.FROZEN),
        resume_requested_at__isnull=False,
    )
    return execs.exists(), files, resumes.exists()
