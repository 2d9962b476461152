"""A WebSocket into a private preview's app ends when its viewer's access does: a member
removed from the team, a token (turned into the viewer cookie) revoked, the preview
made private under a stranger's socket. Through the preview gateway (the port preview
URLs name, the only door to previews), which relays the tunnel while daphne watches
its viewer. Real daphne, gateway, Celery worker,
runner agent, Docker; the revocations go through the pages people use. A public
preview's sockets are left alone."""

import asyncio
import socket
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.conf import settings
from django.test import Client
from django.utils import timezone
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.typing import Origin

from accounts.access import Actor
from accounts.models import ApiToken, Membership
from deploys.models import Release
from tests.support import servers
from tests.support.previews import PROBE_APP, Browser, PreviewAgent, both_runtimes, write
from workspaces.actions import create_workspace

pytestmark = pytest.mark.docker


RECHECK_S = 1  # the periodic check of the `rechecking` pair (the default is 30 s)


@pytest.fixture
def rechecking(berth_server) -> Iterator[servers.Server]:
    """A second daphne and gateway on the same database and previews, checking each
    tunnel every RECHECK_S: what catches a change no signal told."""
    with servers.daphne(
        env={"WEBSOCKET_ACCESS_RECHECK_S": str(RECHECK_S)},
        gateway_port=servers.free_port(),
        name="daphne-rechecking",
    ) as server:
        yield server


def viewer_cookie(server: servers.Server, link: str) -> str:
    """A browser's preview cookie, from a ticket link Berth gave (as `open` does)."""
    browser = Browser(server)
    browser.open(link)
    return "; ".join(f"{k}={v}" for k, v in browser.cookies.items())


def signed_in_link(user, preview: dict) -> str:
    """What "Open" on Berth's preview page gives a signed-in person: a ticket link."""
    client = Client()
    client.force_login(user)
    r = client.get(f"/previews/{preview['id']}/open")
    assert r.status_code == 302, r.content
    return str(r["Location"])


def post_as(user, path: str, data: dict | None = None) -> int:
    client = Client()
    client.force_login(user)
    return client.post(path, data or {}).status_code


async def tunnel(port: int, preview: dict, cookie: str = "") -> ClientConnection:
    """A WebSocket to the app's /ws through the door on `port`, as the preview's (or
    the release's: its `host`) own page would open it."""
    host = f"{preview.get('host') or preview['id'] + '.preview.localhost'}:{settings.PREVIEW_PORT}"
    ws = await connect(
        f"ws://{host}/ws",
        sock=socket.create_connection(("127.0.0.1", port)),
        proxy=None,
        origin=Origin(f"http://{host}"),
        additional_headers={"Cookie": cookie} if cookie else None,
    )
    assert await echoes(ws)
    return ws


async def echoes(ws: ClientConnection) -> bool:
    await ws.send("still there?")
    return await asyncio.wait_for(ws.recv(), 10) == "echo:still there?"


async def closed_within(ws: ClientConnection, seconds: float) -> int | None:
    """The close code the browser's side got, once it comes within `seconds`."""
    try:
        async with asyncio.timeout(seconds):
            while True:
                await ws.recv()
    except ConnectionClosed:
        return ws.close_code
    except TimeoutError:
        raise AssertionError(f"the WebSocket was still open after {seconds} s") from None


@pytest.fixture
def admin(ready, client, cast) -> Iterator[PreviewAgent]:
    """alice, the team's admin, through the API; she stops the preview at the end
    (carol's own stop is refused once she has lost her access)."""
    _, secret = cast.token(cast.alice, ["workspace:write", "preview"])
    admin = PreviewAgent(client, secret, "probe")
    yield admin
    admin.post(ready, "stop")


def doors(server: servers.Server) -> dict[str, int]:
    return {"gateway": server.gateway_port}


@both_runtimes
def test_removing_a_member_closes_their_preview_websockets(
    ready, admin, berth_server, cast, runtime
):
    """berth_server checks every 30 s (the default): what closes them in time is the
    signal the removal sends."""
    carol = viewer_cookie(berth_server, signed_in_link(cast.carol, ready))
    bob = viewer_cookie(berth_server, signed_in_link(cast.bob, ready))

    async def story() -> None:
        carols = {
            door: await tunnel(port, ready, carol) for door, port in doors(berth_server).items()
        }
        bobs = {door: await tunnel(port, ready, bob) for door, port in doors(berth_server).items()}
        status = await asyncio.to_thread(post_as, cast.alice, "/t/team-a/members/carol/remove/")
        assert status == 302
        started = time.monotonic()
        for door, ws in carols.items():
            assert await closed_within(ws, 5) == 4404, door
        assert time.monotonic() - started < 5
        # Her way back in is shut too; bob's sockets go on.
        for port in doors(berth_server).values():
            with pytest.raises(InvalidStatus):  # refused at the handshake
                await tunnel(port, ready, carol)
        for door, ws in bobs.items():
            assert await echoes(ws), door
            await ws.close()

    asyncio.run(story())


def test_revoking_or_expiring_the_token_behind_a_viewer_cookie_closes_its_websockets(
    ready, admin, agent, berth_server, cast, client
):
    """agent.link asks with carol's token: the cookie it gives stands for that token.
    berth_server checks every 30 s: a revocation is signalled, an expiry is timed."""
    token = ApiToken.objects.get(user=cast.carol, revoked_at=None)
    cookies = {door: viewer_cookie(berth_server, agent.link(ready)) for door in doors(berth_server)}
    expiring, secret = cast.token(cast.carol, ["preview"])
    short_lived = viewer_cookie(berth_server, PreviewAgent(client, secret, "probe").link(ready))
    expires = timezone.now() + timedelta(seconds=3)
    ApiToken.objects.filter(pk=expiring.pk).update(expires_at=expires)

    async def story() -> float:
        sockets = {
            door: await tunnel(port, ready, cookies[door])
            for door, port in doors(berth_server).items()
        }
        timed = {
            door: await tunnel(port, ready, short_lived)
            for door, port in doors(berth_server).items()
        }
        status = await asyncio.to_thread(
            post_as, cast.carol, f"/t/team-a/tokens/{token.public_id}/revoke/"
        )
        assert status == 302
        for door, ws in sockets.items():
            assert await closed_within(ws, 5) == 4401, door
        for door, ws in timed.items():
            assert await closed_within(ws, 10) == 4401, door
        return (timezone.now() - expires).total_seconds()

    late = asyncio.run(story())
    assert -0.1 < late < 2, late


def test_the_periodic_check_closes_what_no_signal_told(ready, admin, agent, rechecking, cast):
    """A membership deleted and a token revoked behind the actions' back (a lost
    signal, a row edited by hand): closed within the check's period."""
    carol = viewer_cookie(rechecking, signed_in_link(cast.carol, ready))
    by_token = viewer_cookie(rechecking, agent.link(ready))
    token = ApiToken.objects.get(user=cast.carol, revoked_at=None)

    async def story() -> None:
        ports = doors(rechecking)
        revoked = {door: await tunnel(port, ready, by_token) for door, port in ports.items()}
        removed = {door: await tunnel(port, ready, carol) for door, port in ports.items()}
        await asyncio.to_thread(
            lambda: ApiToken.objects.filter(pk=token.pk).update(revoked_at=token.created_at)
        )
        for door, ws in revoked.items():
            assert await closed_within(ws, RECHECK_S + 4) == 4401, door
        await asyncio.to_thread(
            lambda: Membership.objects.filter(team=cast.team_a, user=cast.carol).delete()
        )
        for door, ws in removed.items():
            assert await closed_within(ws, RECHECK_S + 4) == 4404, door

    asyncio.run(story())


def test_a_public_previews_websockets_are_left_alone_until_it_is_made_private(
    ready, admin, berth_server, rechecking, cast
):
    """The `rechecking` pair checks every second, berth_server every 30 s: a socket
    there that closes in time was told by the change itself."""
    bob = viewer_cookie(rechecking, signed_in_link(cast.bob, ready))
    assert admin.post(ready, "public", {"public": True}).status_code == 200

    async def story() -> None:
        both = {
            **{f"{door} (checking often)": port for door, port in doors(rechecking).items()},
            **doors(berth_server),
        }
        strangers = {door: await tunnel(port, ready) for door, port in both.items()}
        bobs = {door: await tunnel(port, ready, bob) for door, port in both.items()}
        # bob leaves the team (signalled) and three periodic checks pass: a public
        # preview's sockets, his included, go on.
        status = await asyncio.to_thread(post_as, cast.alice, "/t/team-a/members/bob/remove/")
        assert status == 302
        deadline = time.monotonic() + 3 * RECHECK_S + 0.5
        while time.monotonic() < deadline:
            for door, ws in (*strangers.items(), *bobs.items()):
                assert await echoes(ws), door
            await asyncio.sleep(0.2)
        # Made private: a stranger's socket has no cookie (4401), bob is no longer in
        # the team (4404).
        assert (
            await asyncio.to_thread(
                lambda: admin.post(ready, "public", {"public": False}).status_code
            )
            == 200
        )
        for door, ws in strangers.items():
            assert await closed_within(ws, 5) == 4401, door
        for door, ws in bobs.items():
            assert await closed_within(ws, 5) == 4404, door

    asyncio.run(story())


def test_a_releases_websockets_end_with_their_viewers_access(
    cast, client, signed_in, run_stack, berth_server
):
    """A release's process is a target like a preview's: the same rules.
    berth_server checks every 30 s: what closes these in time is the change's signal."""
    from tests.support.deploys import HOST, Requester, released

    shop = create_workspace(cast.team_a, Actor(cast.alice), "Shop", "shop")
    write(
        shop,
        cast.alice,
        {
            "probe_app.py": PROBE_APP,
            "workspace.toml": '[deploy]\ncommand = "python3 probe_app.py"\nport = 8000\n',
        },
    )
    _, secret = cast.token(cast.alice, ["workspace:read", "deploy:request"])
    released(Requester(client, secret), signed_in, cast, "one")
    process = Release.objects.get(workspace=shop, number=1).process
    assert process is not None
    release = {"id": process.public_id, "host": HOST}

    def team_only() -> int:
        return post_as(cast.alice, "/t/team-a/w/shop/releases/visibility/", {"team_only": "on"})

    async def story() -> None:
        # Public (the default): anyone's socket, until the release is made team-only.
        strangers = {
            door: await tunnel(port, release) for door, port in doors(berth_server).items()
        }
        assert await asyncio.to_thread(team_only) == 302
        for door, ws in strangers.items():
            assert await closed_within(ws, 5) == 4401, door
        # A member's socket, until she is removed from the team.
        carol = await asyncio.to_thread(
            lambda: viewer_cookie(berth_server, signed_in_link(cast.carol, release))
        )
        carols = {
            door: await tunnel(port, release, carol) for door, port in doors(berth_server).items()
        }
        status = await asyncio.to_thread(post_as, cast.alice, "/t/team-a/members/carol/remove/")
        assert status == 302
        for door, ws in carols.items():
            assert await closed_within(ws, 5) == 4404, door

    asyncio.run(story())
