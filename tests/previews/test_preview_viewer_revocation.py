"""A preview cookie stops working as soon as what it was issued on does: a revoked
token's, a removed member's. Through the preview gateway (the only door to previews):
a request on a new connection and one on a connection kept alive from before are both
refused right after the revocation, well inside the viewer cache's time (the gateway
and daphne are told to drop their answers; PREVIEW_VIEWER_TTL_S is only the backstop).
Revocations go through the pages people use."""

import asyncio
import threading
import time

import pytest
from channels.testing import HttpCommunicator
from django.conf import settings
from django.test import Client

from config.asgi import application
from previews import decide, gate
from previews.viewers import forget_viewers
from tests.support.previews import Browser, KeptAlive, cookie_header
from tests.support.servers import wait_for, wait_for_async

pytestmark = pytest.mark.docker

PROMPTLY_S = 2.0  # the old viewer cache served a revoked cookie for up to 30 s


def viewing(berth_server, ready: dict, link: str) -> tuple[Browser, KeptAlive]:
    """A browser holding the preview cookie from `link`, and a kept-alive connection
    with the same cookie: both served."""
    browser = Browser(berth_server)
    browser.open(link)
    assert browser.get(ready["url"]).status_code == 200
    kept = KeptAlive(berth_server.gateway_port, ready, cookie_header(browser))
    assert kept.get()[0] == 200
    assert kept.get()[0] == 200  # again on the same connection: the gateway's own road
    return browser, kept


def refused_promptly(browser: Browser, kept: KeptAlive, ready: dict, since: float) -> None:
    """Both the kept-alive connection and a new one are refused within PROMPTLY_S."""
    wait_for(
        lambda: kept.get()[0],
        PROMPTLY_S,
        interval=0.05,
        what="the kept-alive request to be refused",
        until=lambda status: status in (401, 403),
    )
    fresh = browser.get(ready["url"], headers={"Accept": "application/json"})
    assert fresh.status_code in (401, 403), fresh.text[:300]
    assert fresh.json()["error"]["code"] == "preview_sign_in_required"
    assert time.monotonic() - since < PROMPTLY_S + 1
    # And it stays refused.
    assert kept.get()[0] in (401, 403)


def test_a_revoked_tokens_preview_cookie_is_refused_at_once(agent, ready, berth_server, cast):
    token, secret = cast.token(cast.carol, ["preview"])
    r = agent.client.post(
        f"/api/v1/previews/{ready['id']}/link", HTTP_AUTHORIZATION=f"Bearer {secret}"
    )
    assert r.status_code == 200, r.content
    browser, kept = viewing(berth_server, ready, r.json()["url"])
    try:
        # Carol revokes it on the tokens page.
        client = Client()
        client.force_login(cast.carol)
        since = time.monotonic()
        page = client.post(f"/t/team-a/tokens/{token.public_id}/revoke/")
        assert page.status_code == 302, page.content
        refused_promptly(browser, kept, ready, since)
    finally:
        kept.close()


def test_a_removed_members_preview_cookie_is_refused_at_once(agent, ready, berth_server, cast):
    # Bob, signed in, opens the preview from Berth (the page's "Open": a ticket link).
    client = Client()
    client.force_login(cast.bob)
    r = client.get(f"/previews/{ready['id']}/open")
    assert r.status_code == 302, r.content
    browser, kept = viewing(berth_server, ready, str(r["Location"]))
    try:
        admin = Client()
        admin.force_login(cast.alice)
        since = time.monotonic()
        page = admin.post("/t/team-a/members/bob/remove/")
        assert page.status_code == 302, page.content
        refused_promptly(browser, kept, ready, since)
    finally:
        kept.close()


def ask(ready: dict, cookie: str = "") -> HttpCommunicator:
    """The gateway's question about a request to `ready`, put to daphne's application
    in this process (its deciding door, previews.decide), as the gateway signs it."""
    headers = [
        (b"host", f"{ready['id']}.{settings.PREVIEW_DOMAIN}".encode()),
        (b"accept", b"application/json"),
        (b"x-berth-gateway", gate.gateway_key()),
        (b"x-berth-client", b"127.0.0.1"),
    ]
    if cookie:
        headers.append((b"cookie", cookie.encode()))
    return HttpCommunicator(application, "GET", "/", headers=headers)


@pytest.mark.usefixtures("fresh_channel_layer")
def test_a_lookup_that_straddles_a_revocation_caches_nothing(
    agent, ready, berth_server, cast, monkeypatch
):
    """A viewer lookup that read the database before a revocation and answers after
    its drop signal lets its own request in (it came first) but stores nothing: the
    next request is decided afresh and refused, not served from a stale entry for
    PREVIEW_VIEWER_TTL_S. The lookup is held between its read and its answer by a
    hook of the test's, around the real gate.viewer_standing."""
    token, secret = cast.token(cast.carol, ["preview"])
    r = agent.client.post(
        f"/api/v1/previews/{ready['id']}/link", HTTP_AUTHORIZATION=f"Bearer {secret}"
    )
    assert r.status_code == 200, r.content
    browser = Browser(berth_server)
    browser.open(r.json()["url"])
    cookie = cookie_header(browser)
    assert browser.get(ready["url"]).status_code == 200

    read, release = threading.Event(), threading.Event()
    lookups: list[int | None] = []
    standing = gate.viewer_standing

    def held_after_reading(value: str | None, t: gate.Target) -> gate.Standing:
        answer = standing(value, t)
        lookups.append(answer.code)
        if len(lookups) == 1:
            read.set()
            assert release.wait(30), "the test never let the lookup answer"
        return answer

    monkeypatch.setattr(gate, "viewer_standing", held_after_reading)
    monkeypatch.setattr(decide, "DECIDER", None)  # one of this test's loop
    loop = asyncio.new_event_loop()
    try:

        async def listening() -> decide.Decider:
            # The first question starts the decider's drop listener; a drop of no
            # preview of ours, sent until it is heard, says it listens.
            assert (await ask(ready).get_response(timeout=10))["status"] in (302, 401, 403)
            decider = decide.decider()
            before = decider.lookups.generation

            def heard() -> bool:
                if decider.lookups.generation != before:
                    return True
                forget_viewers(previews=["nothing"])
                return False

            await wait_for_async(heard, 10, 0.2, "the decider to hear drops")
            return decider

        decider = loop.run_until_complete(listening())
        first = loop.create_task(ask(ready, cookie).get_response(timeout=30))
        loop.run_until_complete(asyncio.to_thread(read.wait, 10))
        assert lookups == [None]  # read before the revocation: let in

        # Carol revokes the token on the tokens page while the lookup is held.
        client = Client()
        client.force_login(cast.carol)
        generation = decider.lookups.generation
        assert client.post(f"/t/team-a/tokens/{token.public_id}/revoke/").status_code == 302
        loop.run_until_complete(
            wait_for_async(
                lambda: decider.lookups.generation > generation,
                5,
                0.01,
                "the decider to hear the revocation's drop",
            )
        )
        release.set()
        # The request that came first is answered as it was decided: served.
        assert loop.run_until_complete(first)["status"] == 204
        # The next one is decided again from the database (a second lookup), refused.
        second = loop.run_until_complete(ask(ready, cookie).get_response(timeout=10))
        assert len(lookups) == 2 and lookups[1] is not None, lookups
        assert second["status"] in (401, 403), second
        assert b"preview_sign_in_required" in second["body"]
    finally:
        release.set()
        decider_now = decide.DECIDER
        if decider_now is not None and decider_now.following is not None:
            decider_now.following.cancel()
            loop.run_until_complete(asyncio.gather(decider_now.following, return_exceptions=True))
        loop.close()
