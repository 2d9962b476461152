"""An open WebSocket ends when the access it was opened with does: a token revoked or
expired, a person removed from the team or signed out. The sockets are opened on the
real ASGI app and Redis channel layer (channels' WebsocketCommunicator, and once through
daphne); the revocations go through the pages people use."""

import asyncio
import time
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client
from django.utils import timezone
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed
from websockets.typing import Origin

from accounts.models import ApiToken
from config.asgi import application
from runs.models import Run
from tests.support.logs import connect, session_cookie, write
from workspaces.actions import create_workspace

# Logs in a directory of each test's own, and a channel layer of its own too.
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("data_dir", "fresh_channel_layer"),
]


@pytest.fixture
def running(cast) -> Run:
    from accounts.access import Actor
    from runs.models import RunState

    workspace = create_workspace(cast.team_a, Actor(cast.alice), "Shop", "shop")
    return Run.objects.create(
        workspace=workspace,
        ref="main",
        commit="0" * 40,
        command="make test",
        image=settings.SANDBOX_IMAGE,
        state=RunState.RUNNING,
    )


@pytest.fixture
def slow_backstop(settings):
    """The periodic check far off: what closes a socket in time is the signal."""
    settings.WEBSOCKET_ACCESS_RECHECK_S = 300


async def feed(cookie: str, team: str = "team-a") -> WebsocketCommunicator:
    ws = WebsocketCommunicator(
        application,
        f"/ws/t/{team}/activity",
        headers=[
            (b"origin", b"http://localhost"),
            (b"host", b"localhost"),
            (b"cookie", cookie.encode()),
        ],
    )
    connected, _ = await ws.connect(timeout=5)
    assert connected
    return ws


async def closed_within(ws: WebsocketCommunicator, seconds: float) -> int | None:
    """The close code, once it comes within `seconds` (messages before it are skipped)."""
    deadline = time.monotonic() + seconds
    while True:
        message = await ws.receive_output(timeout=max(deadline - time.monotonic(), 0.01))
        if message["type"] == "websocket.close":
            return message.get("code")


def post_as(user, path: str) -> int:
    client = Client()
    client.force_login(user)
    return client.post(path).status_code


def test_revoking_a_token_closes_the_log_socket_it_opened_at_once(cast, running, slow_backstop):
    token, secret = cast.token(cast.carol)
    _, other = cast.token(cast.carol)
    write(running, ["before"])

    async def watch() -> None:
        ws = await connect(running, secret=secret)
        kept = await connect(running, secret=other)
        for socket in (ws, kept):
            assert (await socket.receive_json_from(timeout=5))["entries"][0]["text"] == "before"
        status = await asyncio.to_thread(
            post_as, cast.carol, f"/t/team-a/tokens/{token.public_id}/revoke/"
        )
        assert status == 302
        assert await closed_within(ws, 5) == 4401
        # The same person's other token streams on.
        await asyncio.to_thread(write, running, ["after"], signal=True)
        assert (await kept.receive_json_from(timeout=5))["entries"][0]["text"] == "after"
        await kept.disconnect()
        # And the revoked one cannot come back.
        again = await connect(running, secret=secret)
        assert await closed_within(again, 5) == 4401

    async_to_sync(watch)()


def test_revoking_a_token_closes_a_preview_log_socket_too(cast, running, slow_backstop):
    from previews.models import Preview

    preview = Preview.objects.create(
        workspace=running.workspace,
        ref="main",
        commit=running.commit,
        command="make serve",
        port=8000,
        run=running,
        state="ready",
    )
    token, secret = cast.token(cast.carol, ["preview"])
    write(running, ["listening"])

    async def watch() -> None:
        ws = WebsocketCommunicator(
            application,
            f"/ws/previews/{preview.public_id}/logs",
            headers=[
                (b"origin", b"http://localhost"),
                (b"host", b"localhost"),
                (b"authorization", f"Bearer {secret}".encode()),
            ],
        )
        assert (await ws.connect(timeout=5))[0]
        assert (await ws.receive_json_from(timeout=5))["entries"][0]["text"] == "listening"
        await asyncio.to_thread(post_as, cast.carol, f"/t/team-a/tokens/{token.public_id}/revoke/")
        assert await closed_within(ws, 5) == 4401

    async_to_sync(watch)()


def test_removing_a_member_closes_their_sockets_and_no_one_elses(cast, running, slow_backstop):
    _, secret = cast.token(cast.carol)
    carol, bob = session_cookie(cast.carol), session_cookie(cast.bob)

    async def watch() -> None:
        by_token = await connect(running, secret=secret)
        by_session = await connect(running, cookie=carol)
        carols_feed = await feed(carol)
        bobs_feed = await feed(bob)
        status = await asyncio.to_thread(post_as, cast.alice, "/t/team-a/members/carol/remove/")
        assert status == 302
        # Her token was revoked with her membership; her session no longer sees the team.
        assert await closed_within(by_token, 5) == 4401
        assert await closed_within(by_session, 5) == 4404
        assert await closed_within(carols_feed, 5) == 4404
        # bob's feed goes on, and tells him.
        entries: list[dict] = []
        while not any(e["verb"] == "member.removed" for e in entries):
            entries += (await bobs_feed.receive_json_from(timeout=5))["entries"]
        assert await bobs_feed.receive_nothing(timeout=0.5)
        await bobs_feed.disconnect()

    async_to_sync(watch)()


def test_a_token_that_expires_closes_its_socket_on_time(cast, running, slow_backstop):
    token, secret = cast.token(cast.carol)
    expires = timezone.now() + timedelta(seconds=2)
    ApiToken.objects.filter(pk=token.pk).update(expires_at=expires)

    async def watch() -> float:
        ws = await connect(running, secret=secret)
        assert await closed_within(ws, 6) == 4401
        return (timezone.now() - expires).total_seconds()

    late = async_to_sync(watch)()
    assert -0.1 < late < 2, late


def test_the_periodic_check_catches_what_no_signal_told(cast, running, settings):
    """A change behind the actions' back (a lost signal, a row edited by hand) or a
    signed-out session: the socket closes within the check's period."""
    settings.WEBSOCKET_ACCESS_RECHECK_S = 1
    token, secret = cast.token(cast.carol)
    carol = Client()
    carol.force_login(cast.carol)
    cookie = f"{settings.SESSION_COOKIE_NAME}={carol.cookies[settings.SESSION_COOKIE_NAME].value}"

    async def watch() -> None:
        ws = await connect(running, secret=secret)
        logs = await connect(running, cookie=cookie)
        activity = await feed(cookie)
        await asyncio.to_thread(
            lambda: ApiToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now())
        )
        assert await closed_within(ws, 4) == 4401
        await asyncio.to_thread(carol.logout)  # the session is gone from the store
        assert await closed_within(logs, 4) == 4404
        assert await closed_within(activity, 4) == 4404

    async_to_sync(watch)()


def test_through_daphne_a_revoked_token_ends_the_socket(cast, running, berth_server):
    """daphne runs with the default backstop (30 s): the signal closes it."""
    token, secret = cast.token(cast.carol)
    url = f"ws://127.0.0.1:{berth_server.port}/ws/runs/{running.public_id}/logs?after=0"

    async def watch() -> tuple[int | None, float]:
        async with ws_connect(
            url,
            proxy=None,
            origin=Origin(berth_server.url),
            additional_headers={"Authorization": f"Bearer {secret}"},
        ) as ws:
            await asyncio.to_thread(
                post_as, cast.carol, f"/t/team-a/tokens/{token.public_id}/revoke/"
            )
            started = time.monotonic()
            with pytest.raises(ConnectionClosed):
                while True:
                    await asyncio.wait_for(ws.recv(), 10)
            assert ws.close_code is not None
            return ws.close_code, time.monotonic() - started

    code, took = asyncio.run(watch())
    assert code == 4401 and took < 5, (code, took)
