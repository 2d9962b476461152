"""Admission order (runs.quotas.admit) on the database alone: which waiting run goes
next when slots free. No task is sent here (on_commit never fires inside a test's
transaction); tests/runs/test_quotas.py proves the same through the real stack."""

import pytest

from accounts.access import Actor
from runs import quotas
from runs.models import Run
from tests.support.hosts import local_host
from tests.support.runs import waiting_runs
from workspaces import actions as workspace_actions


@pytest.fixture
def shops(cast):
    return {
        team: workspace_actions.create_workspace(team, Actor(user), "Shop", "shop", "python-http")
        for team, user in ((cast.team_a, cast.carol), (cast.team_b, cast.charlie))
    }


def names(ids: list[int]) -> list[str]:
    runs = Run.objects.in_bulk(ids)
    return [f"{runs[i].workspace.team.slug}:{runs[i].command}" for i in ids]


def end(run: Run) -> None:
    run.refresh_from_db()
    assert run.finish("succeeded", "exit_zero", "done", 0)


def test_slots_alternate_between_teams_and_a_flood_yields_to_a_lighter_team(cast, shops, settings):
    local_host(slots=3)
    cast.team_a.max_concurrent_runs = 2
    cast.team_a.save()
    flood = waiting_runs(shops[cast.team_a], 6)  # team A asked first
    single = waiting_runs(shops[cast.team_b], 1)
    # A's oldest run first; then B, which has waited for a slot longer than A has. A's
    # second would be within A's limit of 2, but A floods (more waiting than its limit)
    # while B (fewer waiting) has work: A yields half its limit; the third slot stays free.
    assert names(quotas.admit()) == ["team-a:job 0", "team-b:job 0"]
    assert quotas.admit() == []  # nothing changed: nothing more goes
    position = quotas.queue_position(Run.objects.get(pk=flood[3].pk))
    assert position is not None and position["position"] == 3
    assert position["waiting_for"] == "yielding" and "half its limit of 2" in position["message"]

    end(single[0])  # B has no work left: A may use its whole limit again
    assert names(quotas.admit()) == ["team-a:job 1"]
    position = quotas.queue_position(Run.objects.get(pk=flood[3].pk))
    assert position is not None and position["waiting_for"] == "team_limit"

    later = waiting_runs(shops[cast.team_b], 1)
    end(flood[0])  # a slot of A's frees, but A still floods and B has work: B's turn
    assert (
        names(quotas.admit()) == ["team-b:job 0"]
        and Run.objects.get(pk=later[0].pk).admitted_at is not None
    )
    end(later[0])
    assert names(quotas.admit()) == ["team-a:job 2"]  # B has nothing left waiting


def test_two_floods_keep_their_limits(cast, shops, settings):
    """Yielding is for a flood next to a lighter team: two equal queues split evenly."""
    local_host(slots=4)
    for team in (cast.team_a, cast.team_b):
        team.max_concurrent_runs = 2
        team.save()
    waiting_runs(shops[cast.team_a], 3)
    waiting_runs(shops[cast.team_b], 3)
    assert names(quotas.admit()) == ["team-a:job 0", "team-b:job 0", "team-a:job 1", "team-b:job 1"]


def test_the_host_slots_bound_every_team(cast, shops, settings):
    local_host(slots=2)
    waiting_runs(shops[cast.team_a], 3)
    waiting_runs(shops[cast.team_b], 3)
    assert names(quotas.admit()) == ["team-a:job 0", "team-b:job 0"]
    last = Run.objects.filter(workspace__team=cast.team_b).order_by("id").last()
    assert last is not None
    position = quotas.queue_position(last)
    assert position == {
        "position": 2,
        "waiting_for": "host_busy",
        "message": (
            "Waiting: all 2 run slots of the hosts that can run runc are taken; 1 of the team's "
            "runs wait ahead of this one."
        ),
    }


def test_a_cancelled_waiting_run_is_never_admitted(cast, shops, settings):
    local_host(slots=1)
    first, second = waiting_runs(shops[cast.team_a], 2)
    second.finish("cancelled", "cancelled_by_user", "cancelled")
    assert quotas.admit() == [first.pk]
    end(first)
    assert quotas.admit() == []


def test_a_team_within_its_limit_never_yields(cast, shops, settings):
    local_host(slots=4)
    cast.team_a.max_concurrent_runs = 2
    cast.team_a.save()
    waiting_runs(shops[cast.team_a], 2)  # no more than its limit: not a flood
    waiting_runs(shops[cast.team_b], 1)
    assert names(quotas.admit()) == ["team-a:job 0", "team-b:job 0", "team-a:job 1"]
