"""The first steps of a new user, in a real Chromium: sign in, create a token, use it."""

import json
import urllib.request

import pytest

from tests.support.browser import chromium_page

pytestmark = pytest.mark.browser


def test_the_demo_admin_signs_in_creates_a_token_and_the_api_answers(berth_server, cast):
    with chromium_page() as page:
        page.goto(f"{berth_server.url}/")
        assert "/signin/" in page.url
        page.fill("input[name=username]", "alice")
        page.fill("input[name=password]", "alice-password-1")
        page.click("button[type=submit]")
        page.wait_for_url("**/t/team-a/")
        page.click("text=Tokens")
        page.fill("input[name=name]", "browser agent")
        page.check("input[value='workspace:read']")
        page.check("input[value='run']")
        page.click("text=Create token")
        secret = page.input_value("#token-value")
        assert secret.startswith("berth_")
        page.click("text=Back to tokens")
        assert "browser agent" in page.content() and secret not in page.content()

    req = urllib.request.Request(
        f"{berth_server.url}/api/v1/me", headers={"Authorization": f"Bearer {secret}"}
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        me = json.loads(r.read())
    assert me["user"] == "alice" and me["scopes"] == ["run", "workspace:read"]
