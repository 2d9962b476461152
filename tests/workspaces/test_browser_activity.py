"""The workspace page's live activity feed (issue 11): what an agent does appears while
carol watches, marked as an agent's, apart from what people do."""

import json
import urllib.request

import pytest

from accounts.access import Actor
from tests.support.browser import OUTPUT, chromium_page
from workspaces.actions import create_workspace

pytestmark = pytest.mark.browser


def test_an_agents_commit_appears_in_the_feed_while_carol_watches(berth_server, cast):
    create_workspace(cast.team_a, Actor(cast.carol), "Shop", "shop", "python-http")
    _, secret = cast.token(cast.bob, ["workspace:read", "workspace:write"])
    with chromium_page() as page:
        page.set_viewport_size({"width": 1280, "height": 800})
        page.goto(f"{berth_server.url}/signin/?next=/t/team-a/w/shop/?path=app.py")
        page.fill("input[name=username]", "carol")
        page.fill("input[name=password]", "carol-password-1")
        page.click("button[type=submit]")
        page.wait_for_selector(".activity-feed .feed li.person")
        assert "workspace.created" in page.inner_text(".activity-feed")
        assert "Nothing released · Request a deploy" in page.inner_text(".ws-status")
        page.evaluate("window.notReloaded = true")

        request = urllib.request.Request(
            f"{berth_server.url}/api/v1/workspaces/shop/files/NOTES.md",
            method="PUT",
            data=json.dumps({"content": "# notes\n"}).encode(),
            headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as r:
            assert r.status == 200

        newest = page.locator(".activity-feed .feed li").first
        newest.locator("code:text-is('workspace.committed')").wait_for()
        assert newest.get_attribute("class") == "agent"
        assert newest.locator(".mark").get_attribute("title") == "an agent's token"
        assert "bob agent (token of bob)" in newest.inner_text()
        assert page.evaluate("window.notReloaded") is True
        OUTPUT.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(OUTPUT / "workspace.png"))
