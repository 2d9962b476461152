"""Two people edit one file at once (issue 11, scenario 3; issue 26, item 4): both add a
line at its end, so the second save overlaps the first. It is refused with what
overwriting would lose (carol's line) beside bob's, his text is kept through a reload,
and only his choice, named for what it does, writes his over hers."""

import pytest

from accounts.access import Actor
from tests.support.browser import OUTPUT, chromium_pages
from workspaces import history
from workspaces.actions import create_workspace
from workspaces.store import open_store

pytestmark = pytest.mark.browser


def open_app_py(page, server, who: str) -> None:
    page.goto(f"{server.url}/signin/?next=/t/team-a/w/shop/?path=app.py")
    page.fill("input[name=username]", who)
    page.fill("input[name=password]", f"{who}-password-1")
    page.click("button[type=submit]")
    page.wait_for_selector(".cm-editor .cm-content")


def branch_file(workspace) -> str:
    with open_store(workspace) as store:
        head = store.branch_head("main")
        assert head
        return history.read_file(store, head, "app.py")["content"]


def add_line(page, text: str) -> None:
    page.click(".cm-content")
    page.keyboard.press("Control+End")
    page.keyboard.type(f"\n# {text}\n")


def test_the_second_save_sees_what_landed_and_can_save_on_top(berth_server, cast):
    workspace = create_workspace(cast.team_a, Actor(cast.alice), "Shop", "shop", "python-http")
    with chromium_pages(2) as (carol, bob):
        open_app_py(carol, berth_server, "carol")
        open_app_py(bob, berth_server, "bob")
        # Bob types before carol's save lands: a page with nothing unsaved takes the
        # branch's new version when it hears of it (watch.js), and his save would then
        # simply go on top of hers.
        add_line(carol, "carol was here")
        add_line(bob, "bob was here")
        carol.keyboard.press("Control+s")
        carol.wait_for_selector("#save-status.ok")

        bob.keyboard.press("Control+s")
        bob.wait_for_selector("#save-status.error")
        status = bob.inner_text("#save-status")
        assert "Not saved: main moved" in status and "Your text is still in the editor" in status
        assert "bob was here" in bob.inner_text(".cm-content") and bob.is_visible("#dirty")
        # What overwriting would lose: carol's line (-), in place of which his goes (+).
        overlap = bob.locator("#overlap")
        assert overlap.is_visible()
        assert "changed the same lines of app.py" in overlap.inner_text()
        assert bob.locator("#overlap tr.del").inner_text().replace("\n", "") == "-# carol was here"
        assert bob.locator("#overlap tr.add").inner_text().replace("\n", "") == "+# bob was here"
        assert bob.inner_text("#save-over") == "Overwrite their change"
        with bob.context.expect_page() as opened:
            bob.click("#see-changes")
        diff = opened.value
        diff.wait_for_load_state()
        assert "+# carol was here" in diff.inner_text(".diff").replace("\n", "")
        assert "app.py" in diff.inner_text("main")
        OUTPUT.mkdir(parents=True, exist_ok=True)
        bob.screenshot(path=str(OUTPUT / "conflict-told.png"))
        assert "bob was here" not in branch_file(workspace)

        # Nothing is lost on the way: a reload brings his text back, and saving it
        # shows the same choice again.
        bob.reload()
        bob.wait_for_selector(".cm-content")
        assert "bob was here" in bob.inner_text(".cm-content")
        bob.keyboard.press("Control+s")
        bob.wait_for_selector("#overlap:not([hidden])")
        bob.click("#save-over")
        bob.wait_for_selector("#save-status.ok")
        assert bob.is_hidden("#dirty") and bob.is_hidden("#overlap")
        bob.screenshot(path=str(OUTPUT / "conflict.png"))

    with open_store(workspace) as store:
        head = store.branch_head("main")
        assert head
        content = history.read_file(store, head, "app.py")["content"]
        log = history.history(store, head, "app.py", 1, 10)["commits"]
    # Bob chose to save his text on top: his, after looking at carol's commit.
    assert "bob was here" in content
    assert [c["author"]["name"] for c in log[:2]] == ["bob", "carol"]
