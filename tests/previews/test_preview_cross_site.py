"""Every preview and release host shares one site (here `preview.localhost`), so a page
on one team's preview or release is "same-site" to another team's private preview, and
its visitor's viewer cookie goes along with what that page asks. A private preview
therefore takes from other pages only navigations, and only Berth frames it
(previews.headers.refusal / with_frame_ancestors). Real daphne, gateway, Celery
worker, runner agent, Docker; real Chromium for what is about a browser."""

import asyncio
import json
import re
import socket
from collections.abc import Iterator

import pytest
from django.conf import settings
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus
from websockets.typing import Origin

from accounts.access import Actor
from previews.models import Preview
from tests.support import servers
from tests.support.browser import chromium_page, sign_in_as_carol
from tests.support.previews import (
    ENDED,
    PROBE_APP,
    Browser,
    PreviewAgent,
    both_runtimes,
    opened,
    probe_toml,
    write,
)
from workspaces.actions import create_workspace

pytestmark = pytest.mark.docker


REFUSED = "cross_origin_refused"


@pytest.fixture
def team_b_site(cast, client, run_stack, berth_server) -> Iterator[dict]:
    """Team B's preview, made public by charlie (its admin): a page anyone may visit,
    whose code team B wrote."""
    workspace = create_workspace(cast.team_b, Actor(cast.charlie), "Site", "site")
    write(workspace, cast.charlie, {"probe_app.py": PROBE_APP, "workspace.toml": probe_toml()})
    _, secret = cast.token(cast.charlie, ["workspace:read", "workspace:write", "preview"])
    charlie = PreviewAgent(client, secret, "site")
    preview = charlie.wait(charlie.start(), {"ready"} | ENDED)
    assert preview["state"] == "ready", preview
    assert charlie.post(preview, "public", {"public": True}).status_code == 200
    yield preview
    charlie.post(preview, "stop")


def _origin(preview_id: str, port: int | str = settings.PREVIEW_PORT) -> str:
    return f"http://{preview_id}.preview.localhost:{port}"


async def _talk(port: int, url: str, origin: str, cookie: str) -> str:
    """One WebSocket message to the app at `url` through the door on `port`, sent
    with `origin` and `cookie` as a browser would; the app's answer."""
    sock = socket.create_connection(("127.0.0.1", port))
    async with connect(
        url, sock=sock, proxy=None, origin=Origin(origin), additional_headers={"Cookie": cookie}
    ) as ws:
        await ws.send("hello")
        return str(await asyncio.wait_for(ws.recv(), 10))


@both_runtimes
def test_a_private_preview_refuses_other_pages_writes_sockets_and_loads(
    agent, ready, berth_server, runtime
):
    browser = opened(berth_server, agent, ready)
    cookie = "; ".join(f"{k}={v}" for k, v in browser.cookies.items())
    url, own = ready["url"], _origin(ready["id"])
    elsewhere = _origin("evil12")  # another preview's page: the same site
    json_wanted = {"Accept": "application/json"}

    # Another page's write, with carol's cookie: refused before the app sees it.
    r = browser.request(
        "POST", url + "note", data=b"forged", headers={"Origin": elsewhere, **json_wanted}
    )
    assert r.status_code == 403 and r.json()["error"]["code"] == REFUSED
    assert elsewhere in r.json()["error"]["message"]
    # Another page loading it as a subresource (an image, a script, a fetch): refused.
    r = browser.get(
        url + "note?forged",
        headers={
            "Sec-Fetch-Site": "same-site",
            "Sec-Fetch-Mode": "no-cors",
            "Sec-Fetch-Dest": "image",
            **json_wanted,
        },
    )
    assert r.status_code == 403 and r.json()["error"]["code"] == REFUSED
    assert browser.get(url + "notes").json() == []

    # Its own pages write; any page may navigate to it (Berth's frame does, cross-site).
    r = browser.request("POST", url + "note", data=b"mine", headers={"Origin": own})
    assert r.status_code == 200
    r = browser.get(
        url,
        headers={
            "Sec-Fetch-Site": "cross-site",
            "Sec-Fetch-Mode": "navigate",
            "Sec-Fetch-Dest": "iframe",
        },
    )
    assert r.status_code == 200 and "probe app" in r.text
    # ...and only Berth's pages (or its own) draw it in a frame.
    port = berth_server.port
    framers = f"frame-ancestors 'self' http://localhost:{port} http://127.0.0.1:{port}"
    assert r.headers["Content-Security-Policy"] == framers
    assert browser.get(url + "notes").json() == ["POST mine"]
    # Berth's own answers for it too: the sign-in refusal of a stranger.
    r = Browser(berth_server).get(url, headers=json_wanted)
    assert r.status_code == 401 and r.headers["Content-Security-Policy"] == framers

    # A WebSocket from another page is refused at the handshake, in Berth's error
    # shape; its own page's works.
    door = berth_server.gateway_port
    ws_url = f"ws://{ready['id']}.preview.localhost:{settings.PREVIEW_PORT}/ws"
    with pytest.raises(InvalidStatus) as refused:
        asyncio.run(_talk(door, ws_url, elsewhere, cookie))
    assert refused.value.response.status_code == 403
    assert json.loads(refused.value.response.body)["error"]["code"] == REFUSED
    assert asyncio.run(_talk(door, ws_url, own, cookie)) == "echo:hello"


def test_a_public_preview_is_left_to_its_app(agent, ready, berth_server, cast, client):
    _, secret = cast.token(cast.alice, ["workspace:write", "preview"])
    assert (
        PreviewAgent(client, secret, "probe").post(ready, "public", {"public": True}).status_code
        == 200
    )
    stranger = Browser(berth_server)
    r = stranger.request(
        "POST",
        ready["url"] + "note",
        data=b"from a page elsewhere",
        headers={
            "Origin": _origin("evil12"),
            "Sec-Fetch-Site": "cross-site",
            "Sec-Fetch-Mode": "no-cors",
            "Sec-Fetch-Dest": "empty",
        },
    )
    assert r.status_code == 200 and "Content-Security-Policy" not in r.headers
    assert stranger.get(ready["url"] + "notes").json() == ["POST from a page elsewhere"]


def test_berths_own_websockets_refuse_preview_and_release_origins(agent, ready, berth_server):
    url = f"ws://127.0.0.1:{berth_server.port}/ws/previews/{ready['id']}/logs?after=0"

    async def first_message(origin: str) -> str:
        async with connect(
            url,
            proxy=None,
            origin=Origin(origin),
            additional_headers={"Authorization": agent.headers["HTTP_AUTHORIZATION"]},
        ) as ws:
            return json.loads(await asyncio.wait_for(ws.recv(), 10))["type"]

    for origin in (
        _origin(ready["id"]),
        f"http://probe--team-a.apps.localhost:{settings.PREVIEW_PORT}",
        "http://preview.localhost",
    ):
        with pytest.raises(InvalidStatus) as refused:
            asyncio.run(first_message(origin))
        assert refused.value.response.status_code == 403, origin
    assert asyncio.run(first_message(f"http://localhost:{berth_server.port}")) == "entries"


# -- in Chromium ---------------------------------------------------------------------

# What team B's page does to its visitor: a write as a form or script sends it, a load
# as an image or a script does, a WebSocket (no CORS rule covers those: the page reads
# the app's answers), and a frame.
ATTACK = """async (target) => {
  const quietly = (p) => p.then(() => "sent", () => "failed");
  await quietly(fetch(target + "/note", {method: "POST", mode: "no-cors",
                                         credentials: "include", body: "forged-post"}));
  await quietly(fetch(target + "/note?forged-get", {mode: "no-cors", credentials: "include"}));
  const socket = await new Promise((resolve) => {
    const ws = new WebSocket(target.replace("http:", "ws:") + "/ws");
    ws.onopen = () => ws.send("read-as-visitor");
    ws.onmessage = (e) => { resolve(e.data); ws.close(); };
    ws.onerror = () => resolve("refused");
    setTimeout(() => resolve("no answer"), 10000);
  });
  await new Promise((resolve) => {
    const frame = document.createElement("iframe");
    frame.src = target + "/";
    frame.onload = resolve;
    document.body.append(frame);
    setTimeout(resolve, 10000);
  });
  return socket;
}"""


@pytest.fixture
def unguarded(berth_server) -> Iterator[servers.Server]:
    """A second daphne and gateway on the same database, engine and previews, with the
    cross-site guard off (a test-only switch): where the attacks below work."""
    with servers.daphne(
        env={"TEST_PREVIEW_CROSS_SITE_GUARD_OFF": "1"},
        gateway_port=servers.free_port(),
        name="daphne-unguarded",
    ) as server:
        yield server


@pytest.mark.browser
@pytest.mark.parametrize("guard", ["off", "on"])
def test_a_page_on_another_teams_site_cannot_act_as_its_visitor(
    request, agent, ready, team_b_site, berth_server, guard
):
    door = request.getfixturevalue("unguarded") if guard == "off" else berth_server
    private = _origin(ready["id"], door.gateway_port)
    link = agent.link(ready)  # (the ORM refuses Playwright's event loop thread)
    with chromium_page() as page:
        # carol opens her team's private preview from a link Berth gave her: her browser
        # now holds its viewer cookies (they name the host, whatever its port).
        page.goto(link)
        assert page.locator("h1").inner_text() == "probe app"
        # Then she visits team B's public preview, whose page turns on her.
        page.goto(_origin(team_b_site["id"], door.gateway_port) + "/")
        socket_answer = page.evaluate(ATTACK, private)
        framed = [f for f in page.frames if f.url.startswith(private)]
        shown = bool(framed) and framed[0].locator("h1", has_text="probe app").count() == 1
        page.goto(private + "/notes")
        landed = json.loads(page.locator("body").inner_text())

    if guard == "off":  # the attack, working: what the guard is for
        assert landed == ["POST forged-post", "GET forged-get"]
        assert socket_answer == "echo:read-as-visitor"
        assert shown
    else:
        assert landed == []
        assert socket_answer == "refused"
        assert not shown  # frame-ancestors: Chromium draws an error page instead


@pytest.mark.browser
def test_an_app_in_berths_frame_keeps_its_cookie_and_storage_across_reloads(
    agent, ready, berth_server
):
    host = Preview.objects.get(public_id=ready["id"]).host
    with chromium_page(partitioned_storage=True) as page:
        sign_in_as_carol(page, berth_server, f"/previews/{ready['id']}/")
        assert page.locator("#preview-frame").get_attribute("sandbox") == (
            "allow-scripts allow-same-origin allow-forms allow-popups allow-modals allow-downloads"
        )
        storage = f"http://{host}:{berth_server.gateway_port}/storage"
        seen = page.frame_locator("#preview-frame").locator("#seen")

        def load_storage_page() -> dict:
            # The app's own page, in the frame Berth drew (through the ticket exchange).
            page.frame_locator("#preview-frame").locator("h1", has_text="probe app").wait_for(
                timeout=30_000
            )
            inner = next(f for f in page.frames if host in f.url)
            inner.goto(storage)
            seen.filter(has_text=re.compile("cookie")).wait_for()
            return json.loads(seen.inner_text())

        assert load_storage_page() == {"cookie": False, "stored": None}
        page.reload()  # Berth's page again: a new ticket, the same frame's storage
        assert load_storage_page() == {"cookie": True, "stored": "kept"}
