"""The runner agent killed under a session: an exec's output and end, and a frozen
session with its egress, all come back whole when it starts again."""

import base64

import pytest
from django.utils import timezone

from runs.models import Run
from sessions.models import Exec, Session
from tests.support.egress import policy
from tests.support.servers import wait_for
from tests.support.sessions import container_of, lines

pytestmark = pytest.mark.docker


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
def test_an_exec_printing_through_an_agent_restart_keeps_its_whole_log_and_end(
    agent, run_stack, runtime
):
    session = agent.ready(runtime=runtime)
    printer = agent.exec(
        session,
        "for i in $(seq 1 40); do echo line $i; sleep 0.1; done; exit 4",
        detach=True,
        status=202,
    )
    wait_for(lambda: any(e["text"] == "line 3" for e in agent.log(printer)), 30, what="line 3")
    run_stack.agent.kill()
    # It goes on printing while no agent listens: wait until the engine holds more (a
    # whole line is framed with its newline: sandbox/in_image/berth_session.py).
    frame = base64.b64encode(b"line 12\n")
    container = container_of(session["run"])
    wait_for(lambda: frame in container.logs(), 30, what="line 12 in the engine's log")
    restarted = timezone.now()
    run_stack.agent.start()
    ended = agent.wait_exec(printer, timeout=120)
    assert (ended["reason"], ended["exit_code"]) == ("exit_nonzero", 4)
    assert [e["text"] for e in agent.log(printer)] == [f"line {i}" for i in range(1, 41)]
    # And the session goes on: the channel never stopped, and the agent proves the same
    # key to it, never handing a second one (docs/security.md, 32).
    assert lines(agent.exec(session, "echo still")) == ["still"]
    sandbox = Run.objects.select_related("sandbox").get(public_id=session["run"]).sandbox
    assert sandbox.channel_keyed_at is not None and sandbox.channel_keyed_at < restarted
    assert container.logs().count(b"\x1e_ e 1 ") == 1, "its one keyed line"


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
def test_a_frozen_session_survives_an_agent_restart_and_resumes_with_its_egress(
    agent, run_stack, shop, cast, files, runtime
):
    policy(shop, cast, [f"files.test:{files}"], runtime)
    session = agent.ready(idle_freeze_s=2)
    agent.exec(session, "echo warm > $HOME/cache")
    agent.wait_state(session, "frozen", timeout=30)
    run_stack.agent.kill()
    run_stack.agent.start()
    # Still frozen after the reconcile: a paused container is live, not lost.
    row = Session.objects.select_related("run__sandbox").get(public_id=session["id"])
    wait_for(
        lambda: (
            Session.objects.get(pk=row.pk).state == "frozen"
            and container_of(session["run"]).status == "paused"
        ),
        30,
        what="the session to stay frozen through the restart",
    )
    out = agent.exec(session, f"cat $HOME/cache; curl -sS http://files.test:{files}/x")
    assert out["reason"] == "exit_zero", out
    assert lines(out) == ["warm", "hello through the proxy"]
    assert agent.session(session)["state"] == "ready"


@pytest.mark.alone  # restarts the shared dockerd
def test_an_engine_restart_under_a_session_ends_it_lost_and_a_start_keeps_its_files(agent):
    """The engine's restart stops every container (no live-restore): the session ends
    `lost`, never `ready` with nothing behind it, its running exec ends typed, and a
    start brings it back on its files."""
    from tests.support.servers import restart_engine

    session = agent.ready()
    agent.exec(session, "echo draft > /workspace/draft.txt")
    sleeper = agent.exec(session, "sleep 300", detach=True, status=202)
    wait_for(
        lambda: agent.get(f"/execs/{sleeper['id']}").json()["state"] == "running",
        30,
        what="the detached exec to run",
    )
    restart_engine()
    lost = agent.wait_state(session, "lost", "failed", "stopped", timeout=120)
    assert (lost["state"], lost["reason"]) == ("lost", "lost"), lost
    assert "start it again" in lost["message"]
    assert agent.wait_exec(sleeper)["reason"] == "session_stopped"
    r = agent.post(f"/sessions/{session['id']}/start")
    assert r.status_code == 202, r.content
    again = agent.wait_state(session, "ready", "failed", "lost", timeout=120)
    assert again["state"] == "ready", again
    assert lines(agent.exec(session, "cat /workspace/draft.txt")) == ["draft"]


def test_after_an_agent_restart_an_exec_the_channel_never_heard_of_ends_lost(agent, run_stack):
    session = agent.ready()
    sleeper = agent.exec(session, "sleep 300", detach=True, status=202)
    wait_for(
        lambda: agent.get(f"/execs/{sleeper['id']}").json()["state"] == "running",
        30,
        what="the sleeper to run",
    )
    # Running in the sandbox, not only marked so: an exec marked running whose channel
    # never got it is exactly the ghost below (seen on a loaded machine).
    found = agent.exec(session, "cat /proc/[0-9]*/comm 2>/dev/null | grep -x sleep")
    assert lines(found) == ["sleep"], "the sleeper is not in the sandbox"
    # As the agent leaves it when it dies between marking an exec running and asking
    # the channel: running, and unknown to the channel.
    ghost = Exec.objects.create(
        session=Session.objects.get(public_id=session["id"]), command="echo ghost", timeout_s=60
    )
    assert ghost.mark_running(1)
    run_stack.agent.kill()
    run_stack.agent.start()
    ended = agent.wait_exec({"id": ghost.public_id}, timeout=60)
    assert ended["reason"] == "lost", ended
    # The channel knows the sleeper: it runs on, and an exec the new agent hands out
    # meanwhile is its own, never taken for lost.
    assert lines(agent.exec(session, "echo awake")) == ["awake"]
    assert agent.get(f"/execs/{sleeper['id']}").json()["state"] == "running"
