"""A first placement (sandbox.placement, runs.quotas.admit): each run goes to a ready
host that has its runtime and a free slot, the least loaded; a draining host gets
nothing new; work that takes no slot goes where the least is, or is refused typed."""

import pytest

from accounts.access import Actor
from runs import quotas
from runs.models import Run
from sandbox import placement
from sandbox.hosts import Host, HostState
from tests.support.hosts import local_host
from tests.support.runs import waiting_runs
from workspaces import actions as workspace_actions

RUNC_ONLY: dict[str, list[str]] = {"runc": []}
# runsc without --oci-seccomp would run a sandbox without its seccomp filter.
BOTH = {"runc": [], "runsc": ["--network=host", "--oci-seccomp"]}


@pytest.fixture
def shop(cast):
    return workspace_actions.create_workspace(
        cast.team_a, Actor(cast.carol), "Shop", "shop", "python-http"
    )


def hosts_of(ids: list[int]) -> list[str]:
    runs = Run.objects.in_bulk(ids)
    return [runs[i].runner_host for i in ids]


def test_runs_go_to_the_least_loaded_host_within_each_hosts_slots(cast, shop):
    cast.team_a.max_concurrent_runs = 10
    cast.team_a.save()
    local_host(slots=2)
    Host.objects.create(name="b", runtimes=RUNC_ONLY, slots=4)
    waiting_runs(shop, 7)
    admitted = quotas.admit()
    # Each to the smallest share of its slots in use: b (a tie, then by name), local, b,
    # local (2/4 and 1/2 tie: fewer in use first), then b twice; local is full. The
    # seventh waits: all 6 slots are taken.
    assert hosts_of(admitted) == ["b", "local", "b", "local", "b", "b"]
    assert Run.objects.filter(admitted_at=None).count() == 1


def test_a_gvisor_run_waits_for_a_gvisor_host_and_a_runc_run_does_not_wait_for_it(cast, shop):
    cast.team_a.max_concurrent_runs = 10
    cast.team_a.save()
    local_host(slots=1)
    Host.objects.filter(name="local").update(runtimes=RUNC_ONLY)
    Host.objects.create(name="g", runtimes={"runc": [], "runsc": ["--network=host"]}, slots=3)
    gvisor = waiting_runs(shop, 1, "gvisor")[0]
    runc = waiting_runs(shop, 1)[0]
    assert hosts_of(quotas.admit()) == ["g"]  # the runc run; g's runsc is no gVisor
    gvisor.refresh_from_db()
    assert gvisor.admitted_at is None
    position = quotas.queue_position(gvisor)
    assert position is not None and position["waiting_for"] == "no_host"
    assert "no host that can run gvisor is ready" in position["message"]

    Host.objects.filter(name="g").update(runtimes=BOTH)
    assert hosts_of(quotas.admit()) == ["g"]
    runc.refresh_from_db()
    assert runc.runner_host == "g"


def test_a_draining_host_gets_no_new_run_until_it_is_undrained(cast, shop):
    host = local_host(slots=4)
    host.drain()
    run = waiting_runs(shop, 1)[0]
    assert quotas.admit() == []
    position = quotas.queue_position(run)
    assert position is not None and position["waiting_for"] == "no_host"
    host.undrain()
    assert quotas.admit() == [run.pk]
    run.refresh_from_db()
    assert run.runner_host == "local"


def test_work_without_a_slot_is_placed_or_refused_typed(cast):
    host = local_host()
    Host.objects.create(name="b", runtimes=BOTH, slots=4)
    assert placement.place("gvisor", {"local": 3, "b": 1}) == "b"
    assert placement.place("runc", {"local": 0, "b": 1}) == "local"
    host.drain()
    assert placement.place("runc", {}) == "b"
    with pytest.raises(placement.NoHostReady, match="files are on host 'local'") as refused:
        placement.place("runc", {}, pinned="local")
    assert refused.value.status == 503 and refused.value.code == "no_host_ready"
    Host.objects.filter(name="b").update(state=HostState.LOST)
    with pytest.raises(placement.NoHostReady, match="No host that can run runc is ready"):
        placement.place("runc", {})
