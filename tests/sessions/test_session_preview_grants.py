"""A session's preview is a use of the session: once an exec was granted a secret, a
token whose secret list does not hold it is refused on every door of the session's
previews (the API, MCP, the state and navigation WebSockets, the preview gateway with
a cookie it got before the grant, an open tunnel), with the answer the session's exec
door gives (403 `secret_grant_required`); the gateway never serves it the granted
value. A token that covers the grant is still served. A granted session's preview
cannot be made public, and a session whose preview is public takes no grant."""

import asyncio
import base64
from collections.abc import Iterator

import pytest
import requests
from django.test import Client

from tests.previews.test_preview_tunnel_access import closed_within, echoes, tunnel
from tests.support.api import assert_error
from tests.support.logs import open_socket
from tests.support.mcp import Agent, connect
from tests.support.previews import PROBE_APP, Browser, KeptAlive, cookie_header
from tests.support.secrets import VALUE
from tests.support.servers import wait_for
from tests.support.sessions import SERVE, SessionAgent

pytestmark = pytest.mark.docker

SCOPES = ["workspace:read", "workspace:write", "run", "preview"]
JSON = {"Accept": "application/json"}
PROMPTLY_S = 2.0
# The probe app (its WebSocket echo at /ws) on port 8081 of the session, beside SERVE's.
PROBE = (
    f"echo {base64.b64encode(PROBE_APP.encode()).decode()} | base64 -d > /tmp/probe_app.py && "
    "cd /tmp && PORT=8081 setsid -f python3 probe_app.py >/dev/null 2>&1 && "
    "until python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 8081))' "
    "2>/dev/null; do sleep 0.1; done"
)


async def close_code(ws, seconds: float) -> int | None:
    """The code an in-process WebSocket closes with within `seconds` (what it sends
    before, such as a state, is passed over)."""
    async with asyncio.timeout(seconds):
        while True:
            out = await ws.receive_output(timeout=seconds)
            if out["type"] == "websocket.close":
                return out.get("code")


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """One loop for every in-process socket of a test: this process's channel layer
    receives on one loop only."""
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


class TokenAgent(SessionAgent):
    """A session agent that also opens sockets and MCP connections with its token."""

    def __init__(self, client, secret: str) -> None:
        super().__init__(client, secret)
        self.secret = secret


@pytest.fixture
def granter(client, cast, shop, api_key, run_stack, berth_server) -> TokenAgent:
    """carol's token that may grant API_KEY."""
    _, secret = cast.token(cast.carol, SCOPES, secret_names=["API_KEY"])
    return TokenAgent(client, secret)


@pytest.fixture
def stranger(client, cast, shop) -> TokenAgent:
    """carol's other token, on the same team and workspace, without API_KEY."""
    _, secret = cast.token(cast.carol, SCOPES)
    return TokenAgent(client, secret)


def serving(agent: SessionAgent, session: dict, port: int = 8080) -> dict:
    r = agent.post(f"/sessions/{session['id']}/preview", {"port": port})
    assert r.status_code == 202, r.content
    preview = wait_for(
        lambda: agent.get(f"/previews/{r.json()['id']}").json(),
        90,
        interval=0.1,
        what="the session's preview to settle",
        until=lambda p: p["state"] in ("ready", "failed", "stopped"),
    )
    assert preview["state"] == "ready", preview
    return preview


def viewer(berth_server, agent: SessionAgent, preview: dict) -> Browser:
    r = agent.post(f"/previews/{preview['id']}/link")
    assert r.status_code == 200, r.content
    browser = Browser(berth_server)
    browser.open(r.json()["url"])
    return browser


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
def test_the_gateway_stops_serving_a_session_to_a_token_without_its_new_grant(
    granter, stranger, berth_server, runtime
):
    session = granter.ready(runtime=runtime)
    assert granter.exec(session, SERVE)["exit_code"] == 0
    preview = serving(granter, session)
    # The stranger's cookie and a connection of theirs, from before any grant: served.
    browser = viewer(berth_server, stranger, preview)
    assert browser.get(preview["url"] + "hi.txt").status_code == 200
    kept = KeptAlive(berth_server.gateway_port, preview, cookie_header(browser))
    assert kept.get("/hi.txt") == (200, "hello from the session\n")
    assert kept.get("/hi.txt")[0] == 200  # again: the gateway's own road, no asking

    # An exec granted API_KEY leaves it where the session's app serves files.
    told = granter.exec(session, 'echo "$API_KEY" > /workspace/key.txt', secrets=["API_KEY"])
    assert told["exit_code"] == 0

    def fresh() -> tuple[int, str]:
        r = browser.get(preview["url"] + "key.txt", headers=JSON)
        return r.status_code, r.text

    for look in (fresh, lambda: kept.get("/key.txt")):
        status, body = wait_for(
            look,
            PROMPTLY_S,
            interval=0.05,
            what="the stranger to be refused",
            until=lambda got: VALUE in got[1] or got[0] == 403,
        )
        assert VALUE not in body, "the gateway served the granted value"
        assert status == 403 and '"secret_grant_required"' in body, body
        assert "API_KEY" in body
    kept.close()

    # A token that covers the grant is still served (what the app does with it is its own).
    covering = viewer(berth_server, granter, preview)
    page = covering.get(preview["url"] + "key.txt")
    assert page.status_code == 200 and page.text == f"{VALUE}\n"


# The sockets opened here bind this process's channel layer to `loop`: a layer of the
# test's own, so the next test's waits (another loop) are not refused by it.
@pytest.mark.usefixtures("fresh_channel_layer")
def test_every_door_of_a_granted_sessions_preview_refuses_a_token_without_it(
    granter, stranger, berth_server, client, cast, loop
):
    session = granter.ready()
    assert granter.exec(session, SERVE)["exit_code"] == 0
    assert granter.exec(session, PROBE)["exit_code"] == 0
    preview = serving(granter, session)
    probe = serving(granter, session, 8081)
    _, secret = cast.token(cast.alice, SCOPES, secret_names=["API_KEY"])
    admin = SessionAgent(client, secret)

    # Public before any grant: the session then takes none (anyone could read it there).
    assert admin.post(f"/previews/{preview['id']}/public", {"public": True}).status_code == 200
    refused = granter.exec(session, "true", status=409, secrets=["API_KEY"])
    assert refused["error"]["code"] == "session_preview_public", refused
    assert preview["id"] in refused["error"]["message"]
    assert granter.session(session)["secrets"] == []
    assert admin.post(f"/previews/{preview['id']}/public", {"public": False}).status_code == 200

    # A tunnel of the stranger's into the session's app, opened before the grant.
    cookie = cookie_header(viewer(berth_server, stranger, probe))

    async def open_tunnel():
        ws = await tunnel(berth_server.gateway_port, probe, cookie)
        assert await echoes(ws)
        return ws

    async def open_sockets() -> list:
        opened = []
        for path in (
            f"/ws/previews/{probe['id']}/state",
            f"/ws/previews/{probe['id']}/navigations",
        ):
            opened.append(await open_socket(path, secret=stranger.secret))
        return opened

    ws = loop.run_until_complete(open_tunnel())
    sockets_before = loop.run_until_complete(open_sockets())
    # Through daphne: this process's channel layer is the open sockets' loop's now.
    granted = requests.post(
        f"{berth_server.url}/api/v1/sessions/{session['id']}/exec",
        json={"command": "true", "secrets": ["API_KEY"]},
        headers={"Authorization": f"Bearer {granter.secret}"},
        timeout=120,
    )
    assert granted.status_code == 200 and granted.json()["exit_code"] == 0, granted.text
    # The tunnel is checked again at the grant's signal: closed as a refusal (403);
    # the preview's state and navigation sockets too.
    assert loop.run_until_complete(closed_within(ws, 5)) == 4403
    for socket_before in sockets_before:
        assert loop.run_until_complete(close_code(socket_before, 5)) == 4403

    # Granted: no longer made public.
    error = assert_error(
        admin.post(f"/previews/{preview['id']}/public", {"public": True}),
        422,
        "session_granted_secrets",
    )
    assert "API_KEY" in error["message"] and "link" in error["message"]
    # The page door: no "Make public" for it, and a forged form changes nothing.
    page = Client()
    page.force_login(cast.alice)
    shown = page.get(f"/previews/{preview['id']}/").content.decode()
    assert "data-stays-private" in shown and "Make public" not in shown
    assert page.post(f"/previews/{preview['id']}/public/", {"public": "1"}).status_code == 302
    assert granter.get(f"/previews/{preview['id']}").json()["public"] is False

    # The stranger: the answer of the session's own exec door, on every preview door.
    pid = preview["id"]
    assert_error(
        stranger.post(f"/sessions/{session['id']}/exec", {"command": "true"}),
        403,
        "secret_grant_required",
    )
    for r in (
        stranger.get(f"/previews/{pid}"),
        stranger.post(f"/previews/{pid}/link"),
        stranger.get(f"/previews/{pid}/logs"),
        stranger.post(f"/previews/{pid}/stop"),
        stranger.post(f"/previews/{pid}/restart"),
        stranger.post(f"/previews/{pid}/public", {"public": False}),
    ):
        error = assert_error(r, 403, "secret_grant_required")
        assert "API_KEY" in error["message"]
    assert granter.get(f"/previews/{pid}").json()["state"] == "ready"  # the stop was refused

    async def sockets() -> None:
        for path in (f"/ws/previews/{pid}/state", f"/ws/previews/{pid}/navigations"):
            ws = await open_socket(path, secret=stranger.secret)
            message = await ws.receive_output(timeout=10)
            assert message == {"type": "websocket.close", "code": 4403}, (path, message)
        ws = await open_socket(f"/ws/previews/{pid}/state", secret=granter.secret)
        assert (await ws.receive_json_from(timeout=10))["state"] == "ready"
        await ws.disconnect()

    loop.run_until_complete(sockets())

    async def refused_by_mcp(agent: Agent) -> None:
        for tool in ("fetch_preview", "get_preview", "stop_preview"):
            assert (await agent.error(tool, preview_id=pid))["code"] == "secret_grant_required"

    connect(berth_server, stranger.secret, refused_by_mcp)

    async def served_by_mcp(agent: Agent) -> None:
        page = await agent("fetch_preview", preview_id=pid, path="/hi.txt")
        assert page["status"] == 200 and page["body"] == "hello from the session\n"

    connect(berth_server, granter.secret, served_by_mcp)
