"""Two deliveries of one run's prepare task at once (the agent's resend racing a slow
first delivery, or a message left from before) make one sandbox, and the run ends as
its command does: the second leaves the run to the first, which holds its lease
(runs.lease, runs.tasks.prepare_run)."""

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from accounts.access import Actor
from runs import engine_owner, prepare
from runs.models import Run, RunState
from runs.tasks import prepare_run
from tests.support.runs import Agent, no_container_left
from workspaces import actions as workspace_actions

pytestmark = pytest.mark.docker


def test_a_delivery_while_another_prepares_leaves_the_run_to_it(
    client, cast, run_stack, monkeypatch
):
    workspace_actions.create_workspace(cast.team_a, Actor(cast.carol), "Shop", "shop")
    _, secret = cast.token(cast.carol, ["workspace:read", "workspace:write", "run"])
    agent = Agent(client, secret)
    # The first delivery is held inside its preparation until the second has come.
    inside, go_on = threading.Event(), threading.Event()
    entered: list[str] = []
    real = prepare.prepare_and_start

    def held(run, *args, **kwargs):
        entered.append(threading.current_thread().name)
        if len(entered) == 1:
            inside.set()
            assert go_on.wait(60)
        return real(run, *args, **kwargs)

    monkeypatch.setattr(prepare, "prepare_and_start", held)
    # The stack's worker is stopped: the deliveries below are the only ones at first.
    run_stack.worker.kill()
    try:
        run = agent.run("echo once")
        pk = Run.objects.get(public_id=run["id"]).pk
        failures: list[BaseException] = []

        def first() -> None:
            try:
                prepare_run(pk)
            except BaseException as e:  # said by the assertion below
                failures.append(e)
            finally:
                connection.close()

        thread = threading.Thread(target=first, name="first")
        thread.start()
        assert inside.wait(60), failures
        row = Run.objects.get(pk=pk)
        assert row.state == RunState.PREPARING and row.prepare_lease_until is not None
        # Held, it is no lost run for the agent's safety net, however long it has been.
        long_ago = timezone.now() - timedelta(minutes=10)
        Run.objects.filter(pk=pk).update(
            admitted_at=long_ago, started_at=long_ago, prepare_sent_at=long_ago
        )
        assert pk not in engine_owner.lost_runs(set())

        prepare_run(pk)  # the second delivery, while the first prepares
        assert entered == ["first"]
        go_on.set()
        thread.join(120)
        assert not failures, failures
        assert Run.objects.get(pk=pk).prepare_lease_until is None  # let go at its end
    finally:
        go_on.set()
        run_stack.worker.start()  # its own delivery comes now, and finds the run carried
    done = agent.wait(run, timeout=120)
    assert done["state"] == "succeeded", done
    assert agent.output(done) == ["once"]
    assert entered == ["first"]
    assert no_container_left(done)


def test_a_fault_of_berths_own_in_a_preparation_ends_the_run_typed(cast, monkeypatch, run_stack):
    """Not sent again for ever by the agent's safety net, each delivery failing alike:
    ended `error` / `sandbox_failed`, saying what went wrong."""
    workspace_actions.create_workspace(cast.team_a, Actor(cast.carol), "Shop", "shop")
    _, secret = cast.token(cast.carol, ["workspace:read", "workspace:write", "run"])

    def broken(run, *args, **kwargs):
        raise RuntimeError("a bug in the preparation")

    monkeypatch.setattr(prepare, "prepare_and_start", broken)
    run_stack.worker.kill()  # this delivery is the only one
    try:
        run = Agent(Client(), secret).run("echo never")
        prepare_run(Run.objects.get(public_id=run["id"]).pk)
    finally:
        run_stack.worker.start()
    row = Run.objects.get(public_id=run["id"])
    assert (row.state, row.reason) == (RunState.ERROR, "sandbox_failed"), row
    assert "RuntimeError: a bug in the preparation" in row.message
