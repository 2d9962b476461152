"""The editor beside a session (issue 26, item 3), in a real Chromium on the real stack:
the files whose session copy differs from the branch are marked, the session's copy
opens read-only, and a save the session left alone (it had changed the file too) shows
as a conflict in the editor, then and after a reload."""

import pytest

from tests.support.browser import OUTPUT, RUN_TIMEOUT_MS, chromium_page

pytestmark = [pytest.mark.browser, pytest.mark.docker]


def open_editor(page, server, path: str) -> None:
    page.goto(f"{server.url}/signin/?next=/t/team-a/w/shop/?path={path}")
    page.fill("input[name=username]", "carol")
    page.fill("input[name=password]", "carol-password-1")
    page.click("button[type=submit]")
    page.wait_for_selector(".cm-editor .cm-content")


def test_the_editor_marks_the_sessions_changes_and_a_save_it_left_alone(
    berth_server, run_stack, agent
):
    session = agent.ready(runtime="runc")
    done = agent.exec(session, "printf '# from the session\\n' >> app.py && echo new > notes.txt")
    assert done["exit_code"] == 0, done

    with chromium_page() as page:
        open_editor(page, berth_server, "app.py")
        marks = page.locator("#session-marks")
        assert session["id"] in marks.inner_text()
        changed = page.locator(".tree a.entry[data-path='app.py'].session-changed")
        changed.wait_for(timeout=RUN_TIMEOUT_MS)
        assert "differs" in changed.get_attribute("title")
        assert "session-changed" in page.get_attribute(".file-tab[data-path='app.py']", "class")
        listed = marks.locator(".session-files").inner_text()
        assert "app.py modified" in listed and "notes.txt added" in listed
        assert page.locator(".tree a.entry[data-path='README.md'].session-changed").count() == 0
        assert "2 file(s) differ" in marks.inner_text()

        # The session's copy, read-only, against the branch.
        page.click("#open-session-copy")
        page.wait_for_selector("#session-copy")
        assert page.inner_text("#session-copy").endswith("# from the session\n")
        assert "+# from the session" in page.inner_text(".diff").replace("\n", "")
        page.go_back()
        page.wait_for_selector(".cm-content")

        # Carol saves app.py: the session had changed it too, so the write leaves the
        # session's copy as it is — a conflict, said in the editor.
        page.click(".cm-content")
        page.keyboard.press("Control+Home")
        page.keyboard.type("# carol's first line\n")
        page.keyboard.press("Control+s")
        page.wait_for_selector("#save-status.warn")
        banner = page.locator("#session-conflict")
        banner.wait_for()
        assert f"Conflict with session {session['id']}" in banner.inner_text()
        assert "session-conflict" in page.get_attribute(
            ".tree a.entry[data-path='app.py']", "class"
        )
        assert banner.locator("#open-session-copy-conflict").count() == 1
        OUTPUT.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(OUTPUT / "editor-session-conflict.png"))

        page.reload()
        page.wait_for_selector("#session-conflict:not([hidden])")
        assert "S!" in page.inner_text(".file-tab[data-path='app.py']")

    assert agent.cat(session, "app.py").endswith("# from the session")
    assert agent.branch_file("app.py").startswith("# carol's first line\n")
