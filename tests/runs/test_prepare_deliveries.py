"""Two deliveries of one run's prepare task at once (the agent's resend racing a slow
first delivery, or a message left from before) make one sandbox, and the run ends as
its command does: the second leaves the run to the first (runs.tasks.prepare_run)."""

import threading

import pytest
from django.db import connection

from accounts.access import Actor
from runs.models import Run
from runs.tasks import prepare_run
from sandbox.models import Sandbox
from tests.support.runs import Agent, no_container_left
from workspaces import actions as workspace_actions

pytestmark = pytest.mark.docker


def test_two_deliveries_at_once_make_one_sandbox_and_the_run_succeeds(client, cast, run_stack):
    workspace_actions.create_workspace(cast.team_a, Actor(cast.carol), "Shop", "shop")
    _, secret = cast.token(cast.carol, ["workspace:read", "workspace:write", "run"])
    agent = Agent(client, secret)
    # The stack's worker is stopped: the two deliveries below are the only ones at first.
    run_stack.worker.kill()
    try:
        run = agent.run("echo once")
        pk = Run.objects.get(public_id=run["id"]).pk
        start = threading.Barrier(2)
        failures: list[BaseException] = []

        def deliver() -> None:
            try:
                start.wait()
                prepare_run(pk)
            except BaseException as e:  # said by the assertion below
                failures.append(e)
            finally:
                connection.close()

        threads = [threading.Thread(target=deliver) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert not failures, failures
    finally:
        run_stack.worker.start()  # its own delivery comes now, and finds the run carried
    done = agent.wait(run, timeout=120)
    assert done["state"] == "succeeded", done
    assert agent.output(done) == ["once"]
    assert Sandbox.objects.filter(owner_kind="run", owner_id=run["id"]).count() == 1
    assert no_container_left(done)
