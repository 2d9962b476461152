"""A folder's README.md on the workspace page: rendered as Markdown, and as untrusted
input — its HTML is text, its images load nothing, its links go nowhere unsafe."""

import pytest
from playwright.sync_api import expect

from accounts.access import Actor
from tests.support.browser import chromium_page, serious_violations, sign_in_as
from workspaces import actions
from workspaces.changes import Change

pytestmark = pytest.mark.browser

README = b"""# Shop

A *small* shop. Read [the guide](guide.md) or [the app](../app.py), [Berth](https://example.com).

<script>window.pwned = 1</script>

<img src="/steal" onerror="window.pwned = 2">

![logo](https://tracker.example/pixel.png) [click](javascript:window.pwned=3)

| size | price |
|------|------:|
| S    | 3     |
"""


@pytest.fixture
def shop(cast):
    workspace = actions.create_workspace(
        cast.team_a, Actor(cast.alice), "Shop", "shop", "python-http"
    )
    actions.commit_changes(
        workspace,
        Actor(cast.alice),
        [Change("write", "docs/README.md", README), Change("write", "docs/guide.md", b"# Guide\n")],
        "Docs",
    )
    return workspace


def test_a_folders_readme_is_rendered_and_its_script_never_runs(berth_server, cast, shop):
    with chromium_page() as page:
        requests: list[str] = []
        page.on("request", lambda r: requests.append(r.url))
        sign_in_as(page, berth_server, "carol", "/t/team-a/w/shop/?path=docs")
        readme = page.locator("article.readme")
        expect(readme.locator("h1")).to_have_text("Shop")
        expect(readme.locator("em")).to_have_text("small")
        expect(readme.locator("table td").last).to_have_text("3")
        # The HTML is shown as text: no element made of it, nothing of it ran.
        expect(readme).to_contain_text("<script>window.pwned = 1</script>")
        assert readme.locator("script, img").count() == 0
        assert page.evaluate("window.pwned") is None
        # The image is its alt text; nothing was fetched for it or for /steal.
        expect(readme.locator(".readme-image")).to_have_text("[image: logo]")
        assert not [u for u in requests if "tracker.example" in u or u.endswith("/steal")]
        # A javascript: link is no link; http(s) links keep their target, rel'd.
        assert readme.locator("a[href^=javascript]").count() == 0
        berth = readme.get_by_role("link", name="Berth")
        assert berth.get_attribute("href") == "https://example.com"
        assert "noopener" in (berth.get_attribute("rel") or "")
        assert not serious_violations(page)

        # A relative link opens that file of the workspace, resolved from the folder.
        readme.get_by_role("link", name="the app").click()
        page.wait_for_url("**path=app.py")
        page.wait_for_selector("#editor .cm-content")
        page.go_back()
        page.locator("article.readme").get_by_role("link", name="the guide").click()
        page.wait_for_url("**path=docs%2Fguide.md")
        expect(page.locator(".cm-content")).to_contain_text("# Guide")
