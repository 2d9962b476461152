"""Issue 11, scenario 1, as one story in a real Chromium on the real stack: carol signs
in, creates a workspace from `python-http`, edits the page text, saves with Ctrl-S (the
commit is in History), runs the tests with Ctrl+Enter and watches them pass, starts a
preview and sees her text in the preview pane."""

import pytest

from tests.support.browser import OUTPUT, chromium_page

pytestmark = [pytest.mark.browser, pytest.mark.docker]

SLOW_MS = 120_000


def test_carol_edits_saves_runs_and_previews_her_change(berth_server, run_stack, cast):
    with chromium_page() as page:
        page.set_viewport_size({"width": 1280, "height": 800})
        page.goto(f"{berth_server.url}/")
        page.fill("input[name=username]", "carol")
        page.fill("input[name=password]", "carol-password-1")
        page.click("button[type=submit]")
        page.wait_for_url("**/t/team-a/")
        page.fill("input[name=name]", "Harbour")
        page.check("input[name=template][value=python-http]")
        page.click("text=Create workspace")
        page.wait_for_url("**/t/team-a/w/harbour/")

        # Edit the page's text and the test that pins it, each saved with Ctrl-S.
        for path, old, new in [
            ("app.py", "Hello, ", "Ahoy, "),
            ("test_app.py", '"Hello, ', '"Ahoy, '),
        ]:
            page.click(f".tree a:text-is('{path}')")
            page.wait_for_selector(".cm-editor .cm-content")
            text = page.evaluate("window.berthEditor.getText()")
            assert old in text
            page.evaluate("t => window.berthEditor.setText(t)", text.replace(old, new))
            page.fill("#commit-message", f"Say ahoy in {path}")
            page.click(".cm-content")
            page.keyboard.press("Control+s")
            page.wait_for_selector("#save-status.ok")
        # Both files stay open as tabs; the current one is marked.
        tabs = page.locator(".file-tabs .file-tab a")
        assert tabs.all_inner_texts() == ["app.py", "test_app.py"]
        assert page.locator(".file-tab.current a").inner_text() == "test_app.py"
        page.click(".file-tabs a:text-is('app.py')")
        page.wait_for_url("**path=app.py")
        assert "Ahoy, " in page.evaluate("window.berthEditor.getText()")
        page.click(".tabs a:text-is('History')")
        assert "Say ahoy in test_app.py" in page.inner_text("main")
        assert "Say ahoy in app.py" in page.inner_text("main")

        # Run the tests from the dock with the keyboard; the log streams to success.
        page.click(".tabs a:text-is('Code')")
        page.fill("#run-command", "python3 -m unittest -v")
        page.keyboard.press("Control+Enter")
        page.wait_for_selector("#run-dock-body [data-run-badge].state-succeeded", timeout=SLOW_MS)
        log = page.inner_text("#run-dock-body .log-lines")
        assert "test_it_greets_by_name" in log and "OK" in log
        assert page.locator("#run-history option[value='python3 -m unittest -v']").count()

        # The preview of the new commit, in the workspace page's pane.
        with page.expect_navigation():
            page.click("[data-start-preview]")
        page.wait_for_selector("#preview-status[data-state=ready]", timeout=SLOW_MS)
        page.click(".tabs a:text-is('Code')")
        page.click("[data-open-side-preview]")
        page.frame_locator("#side-pane iframe").locator("h1", has_text="Ahoy, world!").wait_for(
            timeout=30_000
        )
        assert "What a stop keeps" in page.inner_text(".persists summary")
        OUTPUT.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(OUTPUT / "story.png"), full_page=True)
