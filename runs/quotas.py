"""Per-team quotas and fair admission: no team can use up another team's share.

Admission is a database step, not queue order. A run is recorded `queued` with no
`admitted_at`; `admit` decides which waiting runs go on to a worker:
1. under one lock (AdmissionLock), count the admitted, still active runs per team and
   per host (each ready host's slots, sandbox.hosts);
2. while a slot is free, among the teams below their own concurrency limit that have a
   run waiting, take the team that has waited longest for a slot — the one whose last
   admission is oldest (never: first; a tie goes to the older waiting run) — and admit
   its oldest waiting run (within a team: first come, first served). A flood from one
   team therefore gets every other slot at most while another team waits; and while
   a team with fewer runs waiting has work, a flooding team (more runs waiting than
   its limit) yields: it runs at most half its limit (`_yielding_caps`), so the
   lighter team keeps most of the machine. The run goes to the least loaded ready
   host that has its runtime and a free slot (sandbox.placement): its `runner_host`;
3. after commit, send each admitted run's prepare task (a broker that is down then
   delays it: the runner agent sends it once the broker answers).
It is called when a run is asked for, when any run ends, and by the agent's reconcile
(a safety net if a process died between an end and its admission).

Refusals happen at the door, before anything is recorded: past the team's queue limit
(429 `quota_exceeded`, Retry-After) or its CPU-seconds for the UTC day
(`cpu_budget_exhausted`, with the time it resets). Previews count against their own
limit (previews.actions.make_room).
"""

import datetime
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Max, Q
from django.utils import timezone

from accounts.models import Team
from core import broker, keys
from core.errors import QuotaExceeded
from runs import secrets
from runs.models import ACTIVE_STATES, AdmissionLock, Purpose, Run, RunState, TeamCpuDay
from sandbox import placement
from sandbox.hosts import Host, HostState

NEVER = datetime.datetime.min.replace(tzinfo=datetime.UTC)


@dataclass(frozen=True)
class Limits:
    concurrent_runs: int
    queued_runs: int
    concurrent_previews: int
    cpu_seconds_per_day: int  # 0: no daily budget

    @classmethod
    def of(cls, team: Team) -> "Limits":
        """The operator's per-team override where there is one, else the default."""

        def pick(override: int | None, default: int) -> int:
            return default if override is None else override

        return cls(
            pick(team.max_concurrent_runs, settings.QUOTA_MAX_CONCURRENT_RUNS),
            pick(team.max_queued_runs, settings.QUOTA_MAX_QUEUED_RUNS),
            pick(team.max_concurrent_previews, settings.QUOTA_MAX_CONCURRENT_PREVIEWS),
            pick(team.cpu_seconds_per_day, settings.QUOTA_CPU_SECONDS_PER_DAY),
        )


def day_start(now: datetime.datetime | None = None) -> datetime.datetime:
    now = now or timezone.now()
    return now.astimezone(datetime.UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def cpu_seconds_today(team: Team) -> float:
    """CPU time the team's containers (previews' and releases' processes too) used since
    midnight UTC, as the runner agent sampled it while they ran."""
    row = TeamCpuDay.objects.filter(team=team, day=day_start().date()).first()
    return row.seconds if row else 0.0


def _waiting(team: Team) -> Any:
    return Run.objects.filter(
        workspace__team=team, purpose=Purpose.RUN, state=RunState.QUEUED, admitted_at=None
    )


def _running(team: Team) -> Any:
    return Run.objects.filter(
        workspace__team=team,
        purpose=Purpose.RUN,
        state__in=ACTIVE_STATES,
        admitted_at__isnull=False,
    )


def check_submission(team: Team) -> None:
    """Refuse a new run the team cannot have now, saying when to try again."""
    limits = Limits.of(team)
    waiting = _waiting(team).count()
    if waiting >= limits.queued_runs:
        raise QuotaExceeded(
            f"Team {team.slug} already has {waiting} runs waiting, its limit; wait for some "
            "to start (or cancel some), then try again.",
            {"limit": "queued_runs", "max": limits.queued_runs, "waiting": waiting},
            retry_after=settings.QUOTA_RETRY_AFTER_S,
        )
    if limits.cpu_seconds_per_day:
        used = cpu_seconds_today(team)
        if used >= limits.cpu_seconds_per_day:
            resets = day_start() + datetime.timedelta(days=1)
            raise QuotaExceeded(
                f"Team {team.slug} has used its {limits.cpu_seconds_per_day} CPU-seconds for "
                f"today ({used:.0f} s); new runs can start after {resets:%Y-%m-%d %H:%M} "
                "UTC, or an operator can raise the team's budget.",
                {
                    "limit": "cpu_seconds_per_day",
                    "max": limits.cpu_seconds_per_day,
                    "used": round(used, 1),
                    "resets_at": resets.isoformat(),
                },
                retry_after=max(1, math.ceil((resets - timezone.now()).total_seconds())),
                code="cpu_budget_exhausted",
            )


def admits_at_once(team: Team, runtime: str) -> str:
    """Under the lock, before a new run of `team` is saved: the host `admit` would give
    it at once, since nothing else waits and both a slot of a host that has `runtime`
    and one of the team's are free; else "". A few queries instead of admission's
    round (anything else goes through it)."""
    if Run.objects.filter(purpose=Purpose.RUN, state=RunState.QUEUED, admitted_at=None).exists():
        return ""
    if _admitted_by_team().get(team.pk, 0) >= Limits.of(team).concurrent_runs:
        return ""
    host = placement.choose(placement.able(runtime), _admitted_by_host(), slotted=True)
    return host.name if host else ""


def lock() -> None:
    """Take admission's lock for the caller's transaction."""
    AdmissionLock.take()


def admit() -> list[int]:
    """Admit what may go now (see the module's docstring); returns the admitted ids."""
    from runs.tasks import admit_runs, send_prepare  # not at the top: a cycle

    admitted: list[int] = []
    # Nothing waits (the common case, and every reconcile): no transaction and no lock,
    # so a frequent caller never holds locks another process's bulk statement needs.
    if not Run.objects.filter(
        purpose=Purpose.RUN, state=RunState.QUEUED, admitted_at=None
    ).exists():
        return admitted
    if keys.is_runner():
        # An end on a runner host: admission seals the admitted runs' values for their
        # hosts (runs.secrets) with the web host's key, so the web host's worker admits.
        broker.send(admit_runs, (), queue=settings.CELERY_TASK_DEFAULT_QUEUE)
        return admitted
    with transaction.atomic():
        lock()
        active = _admitted_by_team()
        load = _admitted_by_host()
        able = {runtime: placement.able(runtime) for runtime in ("runc", "gvisor")}
        hosts = {h.name: h for group in able.values() for h in group}
        free = sum(max(0, h.slots - load.get(name, 0)) for name, h in hosts.items())
        if free <= 0:
            return admitted
        waiting = list(
            Run.objects.filter(purpose=Purpose.RUN, state=RunState.QUEUED, admitted_at=None)
            .order_by("queued_at", "id")
            .values_list("id", "workspace__team", "runtime")
        )
        if not waiting:
            return admitted
        runtimes = {run_id: runtime for run_id, _, runtime in waiting}
        waiting_teams = [(run_id, team) for run_id, team, _ in waiting]
        limits = {
            t.pk: Limits.of(t).concurrent_runs
            for t in Team.objects.filter(pk__in={team for _, team in waiting_teams})
        }
        queues: dict[int, list[int]] = {}
        for run_id, team in waiting_teams:  # oldest first, so each team's queue is too
            queues.setdefault(team, []).append(run_id)
        order = {run_id: i for i, (run_id, _) in enumerate(waiting_teams)}
        last = dict(
            Run.objects.filter(purpose=Purpose.RUN, workspace__team__in=list(queues))
            .values_list("workspace__team")
            .annotate(at=Max("admitted_at"))
        )
        served = {team: at or NEVER for team, at in last.items()}
        now = timezone.now()
        caps = _yielding_caps(limits, {t: len(q) for t, q in queues.items()}, active)
        blocked: set[int] = set()  # teams whose next run no host can take this round
        while free > 0:
            ready = [
                t
                for t, q in queues.items()
                if q and active.get(t, 0) < caps[t] and t not in blocked
            ]
            if not ready:
                break
            team = min(ready, key=lambda t: (served.get(t, NEVER), order[queues[t][0]]))
            # Its oldest run that a host can take now: a run whose runtime has no free
            # slot (gVisor on runc-only hosts) holds up none of the others, as a CI job
            # no runner matches holds up no other job.
            pick = next(
                (
                    (i, host)
                    for i, run_id in enumerate(queues[team])
                    if (
                        host := placement.choose(able.get(runtimes[run_id], []), load, slotted=True)
                    )
                ),
                None,
            )
            if pick is None:
                blocked.add(team)  # none of its runs fits now; other teams go on
                continue
            i, host = pick
            run_id = queues[team].pop(i)
            # A microsecond apart: the order of one round's admissions stays readable
            # from admitted_at, which ranks the teams in the next round.
            at = now + datetime.timedelta(microseconds=len(admitted))
            sealed = secrets.placed(Run.objects.get(pk=run_id), host.name)
            if Run.admit(run_id, at, host.name, sealed):
                admitted.append(run_id)
                active[team] = active.get(team, 0) + 1
                load[host.name] = load.get(host.name, 0) + 1
                free -= 1
                served[team] = at  # to the back of the line
        for run_id in admitted:
            transaction.on_commit(partial(send_prepare, run_id))
    return admitted


def _yielding_caps(
    limits: dict[int, int], waiting: dict[int, int], active: dict[int, int]
) -> dict[int, int]:
    """Each team's concurrency cap now (`limits`: team → its limit; `waiting` and
    `active`: team → runs waiting for a slot, admitted runs going): its limit, or half
    of it (at least 1) while it floods (more runs waiting than its limit) and another
    team with at most half as many waiting has work going or waiting. A flood then leaves a
    lighter team more of the machine than the slots alone would: starting and removing
    the flood's containers is the engine's work, which weighs on every team and which
    no CPU weight of a container reaches."""
    teams = {t for t, n in active.items() if n} | {t for t, n in waiting.items() if n}
    caps = {}
    for team, limit in limits.items():
        backlog = waiting.get(team, 0)
        # A flood (more runs waiting than it may run at once) yields to a team with at
        # most half as many waiting: two floods of about the same size never take
        # turns yielding to each other.
        lighter = backlog > limit and any(
            other != team and 2 * waiting.get(other, 0) <= backlog for other in teams
        )
        caps[team] = max(1, limit // 2) if lighter else limit
    return caps


def _admitted_by_team() -> dict[int, int]:
    """Team id → its admitted runs still going (the slots it holds)."""
    return dict(
        Run.objects.filter(purpose=Purpose.RUN, state__in=ACTIVE_STATES, admitted_at__isnull=False)
        .values_list("workspace__team")
        .annotate(n=Count("id"))
    )


def _admitted_by_host() -> dict[str, int]:
    """Host name → the admitted runs still going there (the slots they hold)."""
    return dict(
        Run.objects.filter(purpose=Purpose.RUN, state__in=ACTIVE_STATES, admitted_at__isnull=False)
        .values_list("runner_host")
        .annotate(n=Count("id"))
    )


def _slots_for(runtime: str) -> tuple[int, int]:
    """The run slots of the ready hosts that have `runtime`, and how many are taken."""
    hosts = placement.able(runtime)
    load = _admitted_by_host()
    return sum(h.slots for h in hosts), sum(min(h.slots, load.get(h.name, 0)) for h in hosts)


def _cap_now(team: Team, limit: int) -> int:
    """The team's cap as admission would apply it at this moment."""
    waiting = dict(
        Run.objects.filter(purpose=Purpose.RUN, state=RunState.QUEUED, admitted_at=None)
        .values_list("workspace__team")
        .annotate(n=Count("id"))
    )
    return _yielding_caps({team.pk: limit}, waiting, _admitted_by_team())[team.pk]


def _ready_hosts() -> list[Host]:
    return list(Host.objects.filter(state=HostState.READY))


def cpu_weight(run: Run) -> int:
    """The CPU weight of a run's container, for when the host's cores are contended: a
    team with runs waiting (a flood) gets less per container, the more it has waiting,
    so another team's few runs keep most of their speed. Idle cores are used all the
    same (a weight only matters under contention)."""
    if run.purpose != Purpose.RUN:
        return 1024
    waiting = _waiting(run.workspace.team).count()
    return max(64, 1024 // (1 + waiting))


def queue_position(run: Run) -> dict[str, Any] | None:
    """For a run still waiting for admission: its place in its team's queue and why it
    waits. None once it is admitted (or ended)."""
    if run.state != RunState.QUEUED or run.admitted_at is not None or run.purpose != Purpose.RUN:
        return None
    team = run.workspace.team
    ahead = (
        _waiting(team)
        .filter(Q(queued_at__lt=run.queued_at) | Q(queued_at=run.queued_at, id__lt=run.id))
        .count()
    )
    limit = Limits.of(team).concurrent_runs
    running = _running(team).count()
    slots, busy = _slots_for(run.runtime)
    behind = f"{ahead} of the team's runs wait ahead of this one."
    cap = _cap_now(team, limit) if running < limit else limit
    if running >= limit:
        why, message = (
            "team_limit",
            (
                f"Waiting: team {team.slug} has {running} runs going, its limit of {limit}; "
                + behind
            ),
        )
    elif running >= cap:
        why, message = (
            "yielding",
            (
                f"Waiting: team {team.slug} has {running} runs going; while a team with at "
                f"most half as many runs waiting has work, a flooding team runs at most half "
                f"its limit of {limit}. " + behind
            ),
        )
    elif not slots:
        why, message = (
            "no_host",
            (
                f"Waiting: no host that can run {run.runtime} is ready (an operator starts "
                "or undrains one: manage.py hosts); " + behind
            ),
        )
    elif busy >= slots:
        why, message = (
            "host_busy",
            (
                f"Waiting: all {slots} run slots of the hosts that can run {run.runtime} "
                "are taken; " + behind
            ),
        )
    else:
        why, message = "admission", "Waiting for admission; a slot is free, so any moment."
    return {"position": ahead + 1, "waiting_for": why, "message": message}


# What rooms above this one count against a team's limits, by name (previews registers
# its live previews at app ready): usage() shows them without importing them.
USAGE_PARTS: dict[str, Callable[[Team, Limits], dict[str, Any]]] = {}


def usage(team: Team) -> dict[str, Any]:
    """Live usage against each limit, as the usage page and `GET /api/v1/usage` show."""
    limits = Limits.of(team)
    resets = day_start() + datetime.timedelta(days=1)
    return {
        "team": team.slug,
        "runs": {
            "running": _running(team).count(),
            "max_concurrent": limits.concurrent_runs,
            "queued": _waiting(team).count(),
            "max_queued": limits.queued_runs,
        },
        **{name: part(team, limits) for name, part in USAGE_PARTS.items()},
        "cpu": {
            "seconds_today": round(cpu_seconds_today(team), 1),
            "max_per_day": limits.cpu_seconds_per_day or None,
            "resets_at": resets.isoformat(),
        },
        "host": {
            "slots": sum(h.slots for h in _ready_hosts()),
            "busy": Run.objects.filter(
                purpose=Purpose.RUN, state__in=ACTIVE_STATES, admitted_at__isnull=False
            ).count(),
        },
    }
