"""Finding things on the workspace page, in a real Chromium: the search panel, quick open
(Ctrl-P), the shortcut sheet (?), Ctrl-Enter from inside the editor, and a traceback's
path, in a run's log or a session's exec log, that opens the file at its line."""

import pytest

from accounts.access import Actor
from logs.logstore import LogWriter
from sessions.models import Exec, Session, SessionPolicy, SessionState
from tests.support.browser import (
    RUN_TIMEOUT_MS,
    chromium_page,
    serious_violations,
    sign_in_as_carol,
)
from workspaces import actions
from workspaces.changes import Change
from workspaces.store import open_store

pytestmark = pytest.mark.browser

APP = (
    "import json\n\n\ndef greeting(name):\n    return 'Hello, ' + name\n\n\nprint(greeting('x'))\n"
)
BOOM = "def explode():\n    raise ValueError('boom')\n\n\nexplode()\n"


@pytest.fixture
def shop(cast):
    workspace = actions.create_workspace(cast.team_a, Actor(cast.carol), "Shop", "shop", None)
    actions.commit_changes(
        workspace,
        Actor(cast.carol),
        [
            Change("write", "app.py", APP.encode()),
            Change("write", "boom.py", BOOM.encode()),
            Change("write", "src/lib/util.py", b"def helper():\n    return greeting\n"),
            Change("write", "docs/guide.md", b"# Guide\n"),
            Change("write", "logo.png", b"\x89PNG\0greeting"),
        ],
        "Add files",
    )
    return workspace


def assert_accessible(page, within: str) -> None:
    found = serious_violations(page, within)
    assert not found, found


def cursor_line(page) -> int:
    return page.evaluate(
        "() => { const s = window.berthEditor.view.state;"
        " return s.doc.lineAt(s.selection.main.head).number; }"
    )


def test_the_search_panel_finds_lines_and_opens_the_file_at_the_line(berth_server, cast, shop):
    with chromium_page() as page:
        sign_in_as_carol(page, berth_server, "/t/team-a/w/shop/")
        page.wait_for_selector(".tree")
        page.keyboard.press("Control+Shift+F")
        assert page.is_visible("#search-panel")
        assert page.evaluate("document.activeElement.id") == "search-q"
        page.keyboard.type("greeting")
        page.keyboard.press("Enter")
        hits = page.locator("#search-results .search-hit")
        hits.first.wait_for()
        assert [h.get_attribute("data-path") for h in hits.all()] == [
            "app.py",
            "app.py",
            "src/lib/util.py",
        ]
        assert "3 lines in 2 files" in page.inner_text(".search-summary")
        assert page.locator("#search-results mark").first.inner_text() == "greeting"
        assert "logo.png" in page.text_content(".search-skipped")  # folded, named
        assert_accessible(page, "#search-panel")

        # A bad regex is the panel's message, with its code.
        page.check("#search-panel input[name=regex]")
        page.fill("#search-q", "greeting(")
        page.keyboard.press("Enter")
        page.wait_for_selector("#search-results [data-code=invalid_regex]")
        page.fill("#search-q", r"print\(")
        page.keyboard.press("Enter")
        page.wait_for_selector("#search-results .search-hit[data-line='8']").click()

        page.wait_for_url("**/w/shop/?ref=main&path=app.py&line=8")
        page.wait_for_selector(".cm-editor .cm-content")
        page.wait_for_function("window.berthEditor && document.activeElement.closest('.cm-editor')")
        assert cursor_line(page) == 8
        assert page.inner_text(".cm-activeLine") == "print(greeting('x'))"


def test_quick_open_finds_a_file_by_part_of_its_path(berth_server, cast, shop):
    with chromium_page() as page:
        sign_in_as_carol(page, berth_server, "/t/team-a/w/shop/?path=app.py")
        page.wait_for_selector(".cm-editor .cm-content")
        page.click(".cm-content")  # from inside the editor too
        page.keyboard.press("Control+p")
        page.wait_for_selector("#quick-open[open] [role=option]")
        page.keyboard.type("utl")
        options = page.locator("#quick-open [role=option]")
        page.wait_for_function(
            "document.querySelectorAll('#quick-open [role=option]').length === 1"
        )
        assert options.first.inner_text().startswith("util.py")
        assert options.first.get_attribute("aria-selected") == "true"
        assert_accessible(page, "#quick-open")
        page.keyboard.press("Backspace")
        page.keyboard.press("Backspace")
        page.keyboard.press("Backspace")
        page.keyboard.type("gd")  # docs/guide.md: g…d
        page.wait_for_function(
            "document.querySelector('#quick-open [role=option]')?.innerText.startsWith('guide.md')"
        )
        page.keyboard.press("Enter")
        page.wait_for_url("**/w/shop/?ref=main&path=docs%2Fguide.md")
        # The editor kept the text it had: Ctrl-P typed nothing into it.
        assert page.locator("#dirty").is_hidden()


def test_the_shortcut_sheet_opens_with_a_question_mark_outside_text(berth_server, cast, shop):
    with chromium_page() as page:
        sign_in_as_carol(page, berth_server, "/t/team-a/w/shop/?path=app.py")
        page.wait_for_selector(".cm-editor .cm-content")
        # In the editor, ? is a character.
        page.click(".cm-content")
        page.keyboard.press("Control+End")
        page.keyboard.type("?")
        assert not page.evaluate("document.getElementById('shortcuts').open")
        assert page.inner_text(".cm-content").rstrip().endswith("?")

        page.click(".pane-bar .crumbs")  # out of the editor
        page.keyboard.press("?")
        page.wait_for_selector("#shortcuts[open]")
        sheet = page.inner_text("#shortcuts")
        for key in ("Ctrl", "P", "Enter", "Shift", "Esc"):
            assert key in sheet
        assert_accessible(page, "#shortcuts")
        page.keyboard.press("Escape")
        page.wait_for_selector("#shortcuts:not([open])", state="attached")
        page.click("[data-shortcuts]")  # the button says the same
        page.wait_for_selector("#shortcuts[open]")


@pytest.mark.docker
def test_ctrl_enter_in_the_editor_runs_and_a_traceback_opens_the_file_at_its_line(
    berth_server, run_stack, cast, shop
):
    with chromium_page() as page:
        sign_in_as_carol(page, berth_server, "/t/team-a/w/shop/?path=app.py")
        page.wait_for_selector(".cm-editor .cm-content")
        page.fill(
            "#run-command",
            "printf 'boom.py:2: raised here\\n/usr/lib/x.py:1: no\\n'; python3 boom.py",
        )
        page.click(".cm-content")
        page.keyboard.press("Control+Home")
        page.keyboard.press("Control+Enter")
        # Ran from the editor, and the editor got no blank line.
        page.wait_for_selector("#run-dock-body .dock-run")
        assert page.locator("#dirty").is_hidden()
        assert page.evaluate("window.berthEditor.getText()") == APP

        links = page.locator("#run-dock-body a.source-link")
        page.wait_for_selector("#run-dock-body .badge.state-failed", timeout=RUN_TIMEOUT_MS)
        hrefs = [a.get_attribute("href") for a in links.all()]
        assert "/t/team-a/w/shop/?ref=main&path=boom.py&line=2" in hrefs
        assert "/t/team-a/w/shop/?ref=main&path=boom.py&line=5" in hrefs
        assert not [h for h in hrefs if "usr" in h]  # outside /workspace: text only
        # The traceback's own line: File "/workspace/boom.py", line 2.
        frame = page.locator(
            "#run-dock-body a.source-link", has_text='"/workspace/boom.py", line 2'
        )
        frame.click()
        page.wait_for_url("**/w/shop/?ref=main&path=boom.py&line=2")
        page.wait_for_function("window.berthEditor && document.activeElement.closest('.cm-editor')")
        assert cursor_line(page) == 2
        assert "raise ValueError" in page.inner_text(".cm-activeLine")


def test_a_sessions_exec_log_links_paths_from_its_working_directory(berth_server, cast, shop):
    with open_store(shop) as store:
        head = store.branch_head("main")
    session = Session.objects.create(
        workspace=shop,
        ref="main",
        base_commit=head,
        runtime="runc",
        state=SessionState.STOPPED,
        requested_by=cast.carol,
        **{k: v for k, v in SessionPolicy.defaults().items() if k != "max_sessions"},
    )
    row = Exec.objects.create(
        session=session, command="python3 x.py", cwd="/workspace/src", timeout_s=60
    )
    with LogWriter(row.public_id) as log:
        log.append("stderr", b'  File "/workspace/app.py", line 8, in <module>\n', None)
        log.append("stderr", b"lib/util.py:2: in helper\n", None)
        log.append("stderr", b"../app.py:1: above the workspace's folder: text\n", None)
    row.mark_running(1)
    row.finish("exit_nonzero", "The command exited with code 1.", exit_code=1)
    with chromium_page() as page:
        sign_in_as_carol(page, berth_server, f"/t/team-a/w/shop/sessions/{session.public_id}/")
        links = page.locator(".exec a.source-link")
        links.first.wait_for()
        assert [a.get_attribute("href") for a in links.all()] == [
            "/t/team-a/w/shop/?ref=main&path=app.py&line=8",
            "/t/team-a/w/shop/?ref=main&path=src%2Flib%2Futil.py&line=2",
        ]
        links.nth(1).click()
        page.wait_for_url("**/w/shop/?ref=main&path=src%2Flib%2Futil.py&line=2")
        page.wait_for_function("window.berthEditor && document.activeElement.closest('.cm-editor')")
        assert cursor_line(page) == 2
