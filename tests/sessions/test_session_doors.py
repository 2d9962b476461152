"""What a session's doors refuse, each with its one error shape and a stable code: other
teams' sessions do not exist, secrets follow their grant, and bad input never starts
anything."""

import pytest

from sessions.models import Session, SessionPolicy
from tests.support.api import assert_error, bearer
from tests.support.secrets import VALUE
from tests.support.sessions import SessionAgent, lines

pytestmark = pytest.mark.docker


@pytest.fixture
def api_key(client, cast, shop):
    _, alice = cast.token(cast.alice, ["workspace:read", "workspace:write", "run"])
    r = client.put(
        "/api/v1/workspaces/shop/secrets/API_KEY",
        {"value": VALUE},
        content_type="application/json",
        **bearer(alice),
    )
    assert r.status_code in (200, 201), r.content


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
