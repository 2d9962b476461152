"""What a session's doors refuse, each with its one error shape and a stable code: other
teams' sessions do not exist, secrets follow their grant, and bad input never starts
anything."""

import base64

import pytest

from sessions.models import Session, SessionPolicy
from tests.support.api import assert_error
from tests.support.secrets import VALUE
from tests.support.servers import wait_for
from tests.support.sessions import (
    SessionAgent,
    container_of,
    lines,
    session_volume,
    volume_exists,
)

pytestmark = pytest.mark.docker


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
def test_a_secret_is_in_its_exec_alone_and_the_session_follows_its_grant(
    client, cast, api_key, run_stack, runtime
):
    _, granter = cast.token(
        cast.carol, ["workspace:read", "workspace:write", "run"], secret_names=["API_KEY"]
    )
    agent = SessionAgent(client, granter)
    session = agent.ready(runtime=runtime)
    told = agent.exec(session, 'echo "key: $API_KEY"', secrets=["API_KEY"])
    assert lines(told) == ["key: ***"], "masked in its output"
    assert told["secrets"] == ["API_KEY"]
    # Not in the container's environment, nor in another exec's.
    env = agent.exec(session, "env; cat /proc/1/environ | tr '\\0' '\\n'")
    assert env["reason"] == "exit_zero"
    assert not any("API_KEY" in line or VALUE in line for line in lines(env))
    assert agent.session(session)["secrets"] == ["API_KEY"]

    # A token that could not have granted it cannot use the session any more.
    _, other = cast.token(cast.carol, ["workspace:read", "workspace:write", "run"])
    stranger = SessionAgent(client, other)
    error = assert_error(
        stranger.post(f"/sessions/{session['id']}/exec", {"command": "env"}),
        403,
        "secret_grant_required",
    )
    assert "API_KEY" in error["message"]
    assert_error(stranger.get(f"/execs/{told['id']}"), 403, "secret_grant_required")
    assert_error(stranger.get(f"/execs/{told['id']}/logs"), 403, "secret_grant_required")
    assert_error(stranger.get(f"/sessions/{session['id']}/execs"), 403, "secret_grant_required")
    # It may still see that the session exists, and stop it.
    assert stranger.get(f"/sessions/{session['id']}").status_code == 200
    # A token that may not grant the secret cannot hand it to an exec either.
    assert_error(
        stranger.post(
            f"/sessions/{session['id']}/exec", {"command": "true", "secrets": ["API_KEY"]}
        ),
        403,
        "secret_grant_required",
    )


def test_a_later_execs_secret_is_masked_in_an_earlier_execs_output(
    client, cast, api_key, run_stack
):
    _, granter = cast.token(
        cast.carol, ["workspace:read", "workspace:write", "run"], secret_names=["API_KEY"]
    )
    agent = SessionAgent(client, granter)
    session = agent.ready()
    # Running before any grant, with no secret of its own: it prints what a later exec
    # leaves in a file they share.
    reader = agent.exec(
        session,
        'while [ ! -s /tmp/shared ]; do sleep 0.05; done; echo "read: $(cat /tmp/shared)"',
        detach=True,
        status=202,
    )
    wait_for(
        lambda: agent.get(f"/execs/{reader['id']}").json()["state"] == "running",
        30,
        what="the reader to run",
    )
    agent.exec(session, 'printf %s "$API_KEY" > /tmp/shared', secrets=["API_KEY"])
    assert agent.wait_exec(reader)["reason"] == "exit_zero"
    assert [e["text"] for e in agent.log(reader)] == ["read: ***"]


def test_another_teams_session_and_exec_are_not_found(client, cast, agent):
    session = agent.ready()
    row = agent.exec(session, "echo mine")
    _, theirs = cast.token(cast.charlie, ["workspace:read", "workspace:write", "run"])
    other = SessionAgent(client, theirs)
    for response in (
        other.get(f"/sessions/{session['id']}"),
        other.post(f"/sessions/{session['id']}/exec", {"command": "id"}),
        other.post(f"/sessions/{session['id']}/stop"),
        other.get(f"/execs/{row['id']}"),
        other.get(f"/execs/{row['id']}/logs"),
        other.post(f"/execs/{row['id']}/kill"),
        other.client.delete(f"/api/v1/sessions/{session['id']}", **other.headers),
    ):
        assert_error(response, 404, "not_found")
    assert agent.session(session)["state"] == "ready"


def test_bad_input_is_refused_before_anything_starts(cast, agent):
    assert_error(agent.post("/workspaces/shop/sessions", {"ref": "nope"}), 422, "unknown_branch")
    over = assert_error(
        agent.post("/workspaces/shop/sessions", {"lifetime_s": 10**9}), 422, "over_team_maximum"
    )
    assert over["details"]["field"] == "lifetime_s"
    assert_error(agent.post("/workspaces/shop/sessions", {"privileged": True}), 422, "invalid")
    assert not Session.objects.exists()

    session = agent.ready()
    too_long = agent.post(f"/sessions/{session['id']}/exec", {"command": "x" * 100_001})
    assert too_long.status_code == 422
    assert_error(
        agent.post(f"/sessions/{session['id']}/exec", {"command": "true", "timeout_s": 10**6}),
        422,
        "invalid",
    )
    assert_error(agent.post(f"/sessions/{session['id']}/exec", {"command": "  "}), 422, "invalid")


def test_a_team_at_its_session_limit_gets_a_typed_429(cast, agent):
    SessionPolicy.objects.create(
        team=cast.team_a, **{**SessionPolicy.defaults(), "max_sessions": 1}
    )
    first = agent.open()
    refused = agent.post("/workspaces/shop/sessions", {})
    error = assert_error(refused, 429, "session_limit")
    assert refused["Retry-After"] and "Stop or delete one" in error["message"]
    # Frozen and stopping ones count; a stopped one does not.
    agent.post(f"/sessions/{first['id']}/stop")
    agent.wait_state(first, "stopped", timeout=120)
    assert agent.post("/workspaces/shop/sessions", {}).status_code == 201


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
def test_a_command_in_the_sandbox_cannot_forge_another_execs_output(agent, runtime):
    session = agent.ready(runtime=runtime)
    victim = agent.exec(session, "sleep 60; echo real", detach=True, status=202)
    wait_for(
        lambda: agent.get(f"/execs/{victim['id']}").json()["state"] == "running",
        30,
        what="the victim to run",
    )
    forged = base64.b64encode(b"forged").decode()
    # Unsigned (as frames were once), numbered with a made-up mac, and numbered far
    # ahead: none is the victim's.
    frames = "".join(
        f"\\036{victim['id']} o {rest}\\n"
        for rest in (forged, f"1 {'A' * 22}== {forged}", f"99 {'B' * 22}== {forged}")
    )
    direct = agent.exec(session, f"printf '{frames}' > /proc/1/fd/1 && echo written")
    if runtime == "runc":
        # The container's output belongs to the channel alone (its own init, not
        # dumpable): the write is refused outright.
        assert "written" not in lines(direct), direct
    else:
        # gVisor lets the sandbox user write there (docs/security.md, 18): the lines
        # reach the engine's log, and the frames' keys are what keeps them out.
        assert "written" in lines(direct), direct
        held = container_of(session["run"]).logs(stdout=True, stderr=False)
        assert held.count(forged.encode()) == 3, held[-500:]
    # Asking the channel itself: without its key, nothing is started, neither under a
    # running exec's id nor a fresh one (docs/security.md, 32).
    ask = (
        "import json, socket, sys\n"
        "for i in sys.argv[1:]:\n"
        "    s = socket.create_connection(('127.0.0.1', 61001))\n"
        "    s.sendall(json.dumps({'op': 'exec', 'id': i, 'command': 'echo forged'}).encode()"
        " + bytes([10]))\n"
        "    print(json.loads(s.makefile().readline()).get('error', 'ok'))\n"
    )
    script = base64.b64encode(ask.encode()).decode()
    agent.exec(session, f"echo {script} | base64 -d > /tmp/ask.py")
    asked = agent.exec(session, f"python3 /tmp/ask.py {victim['id']} zzzzzzzzzzzz")
    assert lines(asked) == ["unproven", "unproven"], asked
    assert agent.post(f"/execs/{victim['id']}/kill", {"force": True}).status_code == 202
    ended = agent.wait_exec(victim)
    assert ended["reason"] == "killed"
    assert not any("forged" in e["text"] for e in agent.log(victim))


def test_deleting_a_live_session_stops_it_and_removes_its_files(agent):
    session = agent.ready()
    agent.exec(session, "echo draft > /workspace/draft.txt")
    volume = session_volume(session)
    r = agent.client.delete(f"/api/v1/sessions/{session['id']}", **agent.headers)
    assert r.status_code == 202 and r.json()["state"] == "stopping", r.content
    deleted = agent.wait_state(session, "deleted", timeout=60)
    assert deleted["reason"] == "deleted"
    assert deleted["persistence"]["uncommitted_files"]["kept_now"] is False
    wait_for(lambda: not volume_exists(volume), 60, what="the session's volume to go")
