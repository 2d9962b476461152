"""A run's command runs behind the image's output wrapper (sandbox/in_image/berth_run.py):
its output reaches the engine a frame per read, paced, and the runner agent splits the
frames back into one log entry a line (logs/follow.py). Through the API's log door, with
a real Celery worker and runner agent on the real Docker engine, under both runtimes.
"""

import pytest

from accounts.access import Actor
from sandbox.models import Sandbox
from tests.sessions.test_session_floods import SHAPES, shapes
from tests.support.runs import Agent
from workspaces import actions as workspace_actions

pytestmark = pytest.mark.docker


@pytest.fixture
def shop(cast):
    return workspace_actions.create_workspace(
        cast.team_a, Actor(cast.carol), "Shop", "shop", "python-http"
    )


@pytest.fixture
def agent(client, cast, shop, run_stack):
    _, secret = cast.token(cast.carol, ["workspace:read", "workspace:write", "run"])
    return Agent(client, secret)


def framed(done: dict) -> bool:
    return Sandbox.objects.get(owner_id=done["id"], kind="run").output_framed


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
def test_a_runs_lines_stay_one_entry_each_in_order_across_frames(agent, runtime):
    """Lines of many lengths, a CRLF line, a line longer than a frame (in 8192-byte
    pieces) and a last line with no newline, on stdout; then a line on stderr."""
    command = f'python3 -c "{SHAPES}"; echo to-stderr >&2'
    done = agent.wait(agent.run(command, runtime=runtime), timeout=180)
    assert done["state"] == "succeeded", (done["reason"], done["message"])
    assert framed(done)
    log = agent.log(done)
    assert [e["text"] for e in log if e["stream"] == "stdout"] == shapes()
    assert [e["text"] for e in log if e["stream"] == "stderr"] == ["to-stderr"]
    assert [e["seq"] for e in log] == list(range(1, len(log) + 1))


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
def test_a_runs_flood_is_paced_at_its_source_and_arrives_whole(agent, runtime):
    """Three times what the agent stores at once for a sandbox (a second's worth): the
    wrapper reads it no faster than the agent stores it, so none is dropped, where the
    engine alone passed 200,000 lines a second and the agent dropped what it could not
    store."""
    total = 300_000
    done = agent.wait(agent.run(f"seq 1 {total}", runtime=runtime), timeout=180)
    assert done["state"] == "succeeded", (done["reason"], done["message"])
    assert agent.output(done) == [str(i) for i in range(1, total + 1)]


def test_the_commands_exit_and_signals_are_its_own(agent):
    """Behind the wrapper a pipe ends quietly by SIGPIPE (the shell's default, not the
    interpreter's ignored one), an exit code passes through, and a command killed by a
    signal ends as the image's init reports it (128 + the signal)."""
    done = agent.wait(agent.run("yes | head -2; echo status=$?"))
    assert done["state"] == "succeeded", (done["reason"], done["message"])
    log = agent.log(done)
    assert [e["text"] for e in log if e["stream"] == "stdout"] == ["y", "y", "status=0"]
    assert not [e for e in log if e["stream"] == "stderr"]
    killed = agent.wait(agent.run("echo before; kill -USR1 $$"))
    assert (killed["state"], killed["exit_code"]) == ("failed", 128 + 10), killed
    assert agent.output(killed) == ["before"]
