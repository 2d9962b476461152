"""A preview cookie stops working as soon as what it was issued on does: a revoked
token's, a removed member's. Through the preview gateway (the only door to previews):
a request on a new connection and one on a connection kept alive from before are both
refused right after the revocation, well inside the viewer cache's time (the gateway
and daphne are told to drop their answers; PREVIEW_VIEWER_TTL_S is only the backstop).
Revocations go through the pages people use."""

import time

import pytest
from django.test import Client

from tests.support.previews import Browser, KeptAlive, cookie_header
from tests.support.servers import wait_for

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
