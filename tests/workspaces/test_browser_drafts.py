"""Editor work is never lost (issue 26, items 3 and 4), in a real Chromium: unsaved
text survives switching tabs and a reload without a "Leave site?" prompt; while carol
edits, the page says when her file changed on the branch, and her save merges with a
change made elsewhere in it; tabs of files renamed or deleted on the branch are closed
with a word why, or kept and marked while they hold unsaved text."""

import json
import urllib.request

import pytest

from accounts.access import Actor
from tests.support.browser import OUTPUT, chromium_page
from workspaces import history
from workspaces.actions import create_workspace
from workspaces.store import open_store

pytestmark = pytest.mark.browser

DRAFTS = "Object.keys(localStorage).filter((k) => k.startsWith('berth.draft:'))"


@pytest.fixture
def shop(cast):
    return create_workspace(cast.team_a, Actor(cast.alice), "Shop", "shop", "python-http")


@pytest.fixture
def bob_agent(berth_server, cast):
    """Bob's agent, writing through the API while carol has the page open."""
    _, secret = cast.token(cast.bob, ["workspace:read", "workspace:write"])

    def call(method: str, path: str, body: dict | None = None) -> dict:
        request = urllib.request.Request(
            f"{berth_server.url}/api/v1/workspaces/shop/{path}",
            method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as r:
            return json.loads(r.read() or b"{}")

    return call


def sign_in(page, server, path: str) -> None:
    page.goto(f"{server.url}/signin/?next=/t/team-a/w/shop/?path={path}")
    page.fill("input[name=username]", "carol")
    page.fill("input[name=password]", "carol-password-1")
    page.click("button[type=submit]")
    page.wait_for_selector(".cm-editor .cm-content")


def type_at_end(page, text: str) -> None:
    page.click(".cm-content")
    page.keyboard.press("Control+End")
    page.keyboard.type(text)


def tab(page, path: str):
    return page.locator(f".file-tab[data-path='{path}']")


def branch_file(workspace, path: str) -> str:
    with open_store(workspace) as store:
        head = store.branch_head("main")
        assert head
        return history.read_file(store, head, path)["content"]


def test_a_draft_survives_switching_tabs_and_a_reload_without_a_prompt(berth_server, cast, shop):
    with chromium_page() as page:
        prompts: list[str] = []
        page.on("dialog", lambda d: (prompts.append(d.type), d.dismiss()))
        sign_in(page, berth_server, "app.py")
        type_at_end(page, "\n# carol's unsaved thought\n")
        assert page.is_visible("#dirty")

        # Another file, by the tree: the page goes, the text stays (no "Leave site?").
        page.click(".tree a.entry[data-path='README.md']")
        page.wait_for_url("**path=README.md")
        page.wait_for_selector(".cm-content")
        assert prompts == []
        assert tab(page, "app.py").get_attribute("class").split() == ["file-tab", "unsaved"]
        assert "unsaved" in tab(page, "app.py").locator("a").get_attribute("aria-label")
        assert "unsaved" not in tab(page, "README.md").get_attribute("class")

        # Back by its tab: the text is there, unsaved, and said to be back.
        tab(page, "app.py").locator("a").click()
        page.wait_for_url("**path=app.py")
        page.wait_for_selector("#branch-news:not([hidden])")
        assert "carol's unsaved thought" in page.inner_text(".cm-content")
        assert page.is_visible("#dirty") and "is back" in page.inner_text("#branch-news")

        page.reload()
        page.wait_for_selector(".cm-content")
        assert "carol's unsaved thought" in page.inner_text(".cm-content")
        assert page.is_visible("#dirty") and prompts == []

        page.keyboard.press("Control+s")
        page.wait_for_selector("#save-status.ok")
        assert page.evaluate(DRAFTS) == []
        assert "unsaved" not in tab(page, "app.py").get_attribute("class")
    assert branch_file(shop, "app.py").endswith("# carol's unsaved thought\n")


def test_a_change_made_elsewhere_while_editing_is_said_and_merged_on_save(
    berth_server, cast, shop, bob_agent
):
    with chromium_page() as page:
        sign_in(page, berth_server, "app.py")
        base = page.get_attribute("#editor", "data-base-commit")
        type_at_end(page, "\n# carol's note at the end\n")

        text = branch_file(shop, "app.py")
        theirs = text.replace("A tiny web app", "A tiny web app (bob)", 1)
        bob_agent("PUT", "files/app.py", {"content": theirs, "base_commit": base})

        # Told by the live activity feed, while the text is still hers alone.
        news = page.locator("#branch-news")
        news.locator("text=changed on main").wait_for()
        assert "bob" in news.inner_text() and "saving merges" in news.inner_text()
        assert "(bob)" not in page.inner_text(".cm-content")
        OUTPUT.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(OUTPUT / "editor-branch-moved.png"))

        page.keyboard.press("Control+s")
        page.wait_for_selector("#save-status.ok")
        assert "Merged with what main got" in page.inner_text("#save-status")
        shown = page.evaluate("window.berthEditor.getText()")
        assert "A tiny web app (bob)" in shown and shown.endswith("# carol's note at the end\n")
        assert page.is_hidden("#dirty") and page.is_hidden("#branch-news")
    assert branch_file(shop, "app.py") == shown


def test_tabs_of_renamed_or_deleted_files_are_closed_or_marked_with_why(
    berth_server, cast, shop, bob_agent
):
    with chromium_page() as page:
        sign_in(page, berth_server, "README.md")
        for path in ("test_app.py", "workspace.toml", "app.py"):
            page.click(f".tree a.entry[data-path='{path}']")
            page.wait_for_url(f"**path={path}")
            page.wait_for_selector(".cm-content")
        type_at_end(page, "\n# kept\n")
        page.wait_for_function(f"{DRAFTS}.length === 1")

        bob_agent(
            "POST",
            "commits",
            {
                "message": "Tidy up",
                "changes": [
                    {"op": "delete", "path": "README.md"},
                    {"op": "rename", "path": "test_app.py", "to": "tests/test_app.py"},
                ],
            },
        )
        news = page.locator("#tab-news")
        news.locator("text=Closed README.md").wait_for()
        page.locator("#tab-news:has-text('Closed test_app.py')").wait_for()
        assert "renamed to tests/test_app.py on main" in news.inner_text()
        assert tab(page, "README.md").count() == 0 and tab(page, "test_app.py").count() == 0
        assert tab(page, "workspace.toml").count() == 1

        # The open file goes while it holds unsaved text: marked, said, and kept.
        bob_agent("DELETE", "files/app.py")
        tab(page, "app.py").locator(".gone-why:text-is('deleted')").wait_for()
        assert "gone" in tab(page, "app.py").get_attribute("class")
        assert "was deleted on main" in page.inner_text("#branch-news")
        assert "# kept" in page.inner_text(".cm-content")

        # Away and back: the gone file's page shows the text it held.
        tab(page, "workspace.toml").locator("a").click()
        page.wait_for_url("**path=workspace.toml")
        page.wait_for_selector(".cm-content")
        tab(page, "app.py").locator(".gone-why").wait_for()
        tab(page, "app.py").locator("a").click()
        page.wait_for_url("**path=app.py")
        page.wait_for_selector("#orphan-draft:not([hidden])")
        assert "# kept" in page.inner_text("#orphan-draft pre")
        page.click("#discard-draft")
        assert page.evaluate(DRAFTS) == []
