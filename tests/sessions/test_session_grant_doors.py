"""A session granted secrets is used only by those who cover its grants, and stopping or
deleting it is a use (docs/security.md 35): a teammate's token that may not use it can
neither end the work nor take the uncommitted files of one who may, on any door."""

import pytest

from tests.support.api import assert_error
from tests.support.mcp import Agent, connect
from tests.support.secrets import VALUE
from tests.support.servers import wait_for
from tests.support.sessions import SessionAgent, session_volume, volume_exists

pytestmark = pytest.mark.docker

SCOPES = ["workspace:read", "workspace:write", "run"]


def test_stopping_or_deleting_a_granted_session_needs_its_use_on_every_door(
    client, cast, api_key, run_stack, berth_server, signed_in
):
    # runc only: the check is made at the door, before any engine call, so the
    # runtime plays no part in it (the grant's own tests run under both).
    _, granter = cast.token(cast.carol, SCOPES, secret_names=["API_KEY"])
    agent = SessionAgent(client, granter)
    session = agent.ready()
    sid = session["id"]
    agent.exec(session, 'printf %s "$API_KEY" | wc -c > /workspace/draft.txt', secrets=["API_KEY"])
    volume = session_volume(session)

    _, other = cast.token(cast.carol, SCOPES)
    stranger = SessionAgent(client, other)
    refused = assert_error(
        stranger.post(f"/sessions/{sid}/exec", {"command": "true"}), 403, "secret_grant_required"
    )
    deleting = stranger.client.delete(f"/api/v1/sessions/{sid}", **stranger.headers)
    assert assert_error(deleting, 403, "secret_grant_required") == refused
    stopping = stranger.post(f"/sessions/{sid}/stop")
    assert assert_error(stopping, 403, "secret_grant_required") == refused

    async def refused_on_mcp(mcp: Agent) -> list[dict]:
        return [
            await mcp.error("exec", session=sid, command="true"),
            await mcp.error("close_session", session=sid, delete=True),
            await mcp.error("close_session", session=sid),
        ]

    on_mcp = connect(berth_server, other, refused_on_mcp)
    assert on_mcp == [refused] * 3

    # The session and the covering token's uncommitted file are as they were.
    assert agent.session(session)["state"] == "ready"
    assert agent.cat(session, "/workspace/draft.txt") == str(len(VALUE))
    assert volume_exists(volume)

    # A signed-in member covers any grant of the workspace (they may grant any secret):
    # the page's Stop is theirs.
    page = f"/t/team-a/w/shop/sessions/{sid}/"
    assert signed_in(cast.carol).post(f"{page}stop/").status_code == 302
    agent.wait_state(session, "stopped")

    # A covering token deletes it, files and all.
    async def delete(mcp: Agent) -> dict:
        return await mcp("close_session", session=sid, delete=True)

    assert connect(berth_server, granter, delete)["id"] == sid
    assert agent.wait_state(session, "deleted", timeout=60)["reason"] == "deleted"
    wait_for(lambda: not volume_exists(volume), 60, what="the session's volume to go")
