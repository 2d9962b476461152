"""A session's life with short clocks: idle → frozen → stopped → started again →
deleted, and the persistence statement against what the engine really keeps at each
step (what it says survives does; what it says is lost is gone)."""

import pytest

from sessions.models import Exec, Session
from tests.support.servers import wait_for
from tests.support.sessions import container_of, lines, session_volume, volume_exists

pytestmark = pytest.mark.docker


def kept(session: dict) -> dict[str, bool]:
    return {k: v["kept_now"] for k, v in session["persistence"].items()}


def paused(session: dict) -> bool:
    container = container_of(session["run"])
    container.reload()
    return bool(container.attrs["State"]["Paused"])


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
def test_idle_freezes_then_stops_and_a_start_brings_back_the_files_alone(agent, runtime):
    session = agent.ready(runtime=runtime, idle_freeze_s=2, idle_stop_s=8, retention_s=3600)
    agent.exec(session, "echo home > $HOME/h && echo work > /workspace/w.txt")
    first_run = session["run"]

    frozen = agent.wait_state(session, "frozen", timeout=30)
    assert paused(frozen), "frozen is said only once the engine has paused it"
    assert kept(frozen) == {
        "commits": True,
        "uncommitted_files": True,
        "dependency_cache": True,  # the python-http template has a [setup] step
        "home_and_tmp": True,
        "processes_and_memory": True,
    }

    # The next exec resumes it, transparently: $HOME is there, as the statement says.
    back = agent.exec(session, "cat $HOME/h /workspace/w.txt")
    assert lines(back) == ["home", "work"]
    assert agent.session(session)["state"] == "ready"
    assert not paused(agent.session(session))

    stopped = agent.wait_state(session, "stopped", timeout=60)
    assert stopped["reason"] == "idle" and "without activity" in stopped["message"]
    assert kept(stopped)["home_and_tmp"] is False
    assert kept(stopped)["processes_and_memory"] is False
    assert kept(stopped)["uncommitted_files"] is True
    wait_for(lambda: container_of(first_run) is None, 30, what="the container to go")
    assert volume_exists(session_volume(stopped))

    r = agent.post(f"/sessions/{session['id']}/start")
    assert r.status_code == 202, r.content
    again = agent.wait_state(session, "ready", "failed", timeout=120)
    assert again["state"] == "ready" and again["run"] != first_run and again["starts"] == 2
    # What it said was lost is gone; what it said survives is there.
    home = agent.exec(session, "cat $HOME/h")
    assert home["reason"] == "exit_nonzero"
    assert lines(agent.exec(session, "cat /workspace/w.txt")) == ["work"]


def test_a_detached_process_keeps_it_alive_until_its_maximum_lifetime(agent):
    # The lifetime counts from the ask to start, so it must outlast a start on a loaded
    # machine (seen over 8 s), and still end the test well before the sleep would.
    session = agent.ready(idle_freeze_s=1, idle_stop_s=2, lifetime_s=25)
    sleeper = agent.exec(session, "sleep 300", detach=True, status=202)
    # Past both idle clocks it is still ready: a running exec is activity.
    wait_for(
        lambda: agent.get(f"/execs/{sleeper['id']}").json()["state"] == "running",
        30,
        what="the detached exec to run",
    )
    stopping = agent.wait_state(session, "stopping", "stopped", timeout=60)
    assert stopping["reason"] == "lifetime"
    stopped = agent.wait_state(session, "stopped", timeout=60)
    assert stopped["reason"] == "lifetime" and "maximum lifetime" in stopped["message"]
    ended = agent.wait_exec(sleeper)
    assert ended["reason"] == "session_stopped" and "start the session again" in ended["message"]
    # It never froze: the sleep was activity all along.
    assert stopped["times"]["frozen_at"] is None


def test_a_stopped_session_past_its_retention_is_deleted_with_its_files(agent):
    session = agent.ready(retention_s=2)
    agent.exec(session, "echo draft > /workspace/draft.txt")
    r = agent.post(f"/sessions/{session['id']}/stop")
    assert r.status_code == 202 and r.json()["state"] == "stopping"
    agent.wait_state(session, "stopped", timeout=60)
    volume = session_volume(session)
    deleted = agent.wait_state(session, "deleted", timeout=60)
    assert deleted["reason"] == "retention"
    assert kept(deleted) == {
        "commits": True,
        "uncommitted_files": False,
        "dependency_cache": True,  # shared by key with every run: not the session's
        "home_and_tmp": False,
        "processes_and_memory": False,
    }
    # Removed as the row says deleted, or (a container still holding it as it goes) by
    # the agent's sweep, told by the door (sessions.lifecycle.hand_volume_to_host).
    wait_for(lambda: not volume_exists(volume), 30, what="the session's volume to go")
    refused = agent.exec(session, "true", status=409)
    assert refused["error"]["code"] == "session_deleted"
    assert "open a new one" in refused["error"]["message"]


def test_an_exec_asked_of_a_start_that_stopped_never_runs_at_a_later_one(agent):
    session = agent.ready()
    row = Session.objects.get(public_id=session["id"])
    # As an exec racing a stop leaves it: made while the session was ready, its row
    # saved once the stop had ended the session's execs.
    late = Exec(session=row, command="touch /workspace/ran", timeout_s=60)
    assert agent.post(f"/sessions/{session['id']}/stop").status_code == 202
    agent.wait_state(session, "stopped", timeout=60)
    late.save()
    assert agent.post(f"/sessions/{session['id']}/start").status_code == 202
    agent.wait_state(session, "ready", timeout=120)
    ended = agent.wait_exec({"id": late.public_id}, timeout=60)
    assert ended["reason"] == "not_started", ended
    assert "stopped before it ran" in ended["message"]
    assert lines(agent.exec(session, "test -e /workspace/ran || echo absent")) == ["absent"]


def test_a_reconcile_whose_list_predates_a_freeze_keeps_the_session_frozen(agent, monkeypatch):
    """The reconcile reads the engine's list, then the rows: a freeze landing between
    the two (its pause event already on the row) was undone from the stale list, and
    the keeper took the session for thawed: `ready` with its container paused (a write's
    answer then said `pending`, and an exec would wait on a paused channel). The list
    here is the engine's real answer, read before the freeze (sandbox.loop)."""
    from agent.loop import reconcile_once
    from sandbox import loop
    from sandbox.models import Sandbox

    session = agent.ready(runtime="runc", idle_freeze_s=1)
    stale = loop.listed()
    frozen = wait_for(
        lambda: Session.objects.select_related("run__sandbox").get(public_id=session["id"]),
        60,
        what="the session to freeze",
        until=lambda s: s.state == "frozen",
    )
    assert frozen.run.sandbox.paused
    monkeypatch.setattr(loop, "listed", lambda: stale)
    reconcile_once()
    assert Sandbox.objects.get(pk=frozen.run.sandbox.pk).paused is True
