"""Sessions through the API: one sandbox that lives between an agent's turns, carried by
a real Celery worker and runner agent on the real Docker engine, under both runtimes."""

import pytest

from tests.support.runs import set_toml
from tests.support.servers import wait_for
from tests.support.sessions import lines

pytestmark = pytest.mark.docker


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
def test_an_exec_answers_with_its_output_and_a_process_lives_between_turns(agent, runtime):
    session = agent.ready(runtime=runtime)
    assert session["runtime"] == runtime
    assert session["persistence"]["processes_and_memory"]["kept_now"] is True

    hi = agent.exec(session, "echo hi; echo there >&2; exit 3")
    assert (hi["state"], hi["reason"], hi["exit_code"]) == ("ended", "exit_nonzero", 3)
    assert lines(hi) == ["hi"] and lines(hi, "stderr") == ["there"]

    # A process started in one turn is there in the next: the same sandbox.
    server = agent.exec(session, "sleep 300", detach=True, status=202)
    assert server["state"] in ("queued", "running")
    wait_for(
        lambda: agent.get(f"/execs/{server['id']}").json()["state"] == "running",
        30,
        what="the detached exec to start",
    )
    seen = agent.exec(session, "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done")
    assert any("sleep 300" in line for line in lines(seen))
    # And a file written outside /workspace too, while the session lives.
    agent.exec(session, "echo kept > $HOME/note")
    assert lines(agent.exec(session, "cat $HOME/note")) == ["kept"]

    killed = agent.post(f"/execs/{server['id']}/kill", {})
    assert killed.status_code == 202
    ended = agent.wait_exec(server)
    assert ended["reason"] == "killed"


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
def test_an_exec_past_the_memory_limit_ends_oom_killed_typed(agent, shop, cast, runtime):
    set_toml(shop, cast, f'[sandbox]\nruntime = "{runtime}"\nmemory_mb = 256\n')
    session = agent.ready()
    hog = agent.exec(session, "python3 -c 'x = bytearray(1024 * 1024 * 1024); print(len(x))'")
    assert (hog["state"], hog["reason"]) == ("ended", "oom_killed"), hog
    assert "memory_mb" in hog["message"]
    if runtime == "runc":
        # The kernel killed the exec's process alone (the channel asks to go first):
        # the session answers.
        assert lines(agent.exec(session, "echo alive")) == ["alive"]
        assert agent.session(session)["state"] == "ready"
    else:
        # gVisor's limit is the whole sandbox's: the session ends with it, typed, and
        # starts again on its files.
        failed = agent.wait_state(session, "failed", timeout=60)
        assert failed["reason"] == "process_ended" and "memory" in failed["message"]
