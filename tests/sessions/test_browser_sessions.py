"""A session in a real Chromium, carried by a real Celery worker and runner agent on
Docker: carol opens one from the workspace page, runs commands on its page and watches
their output arrive live, reads what survives, and stops it: the page follows the
session's state without a reload."""

import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from accounts.access import Actor
from sessions.models import Exec, Session
from sessions.persistence import statement
from sessions.views import PERSISTENCE_ROWS
from tests.support.browser import RUN_TIMEOUT_MS, chromium_page, sign_in_as_carol
from workspaces.actions import create_workspace

pytestmark = [pytest.mark.browser, pytest.mark.docker]


@pytest.fixture
def shop(cast):
    return create_workspace(cast.team_a, Actor(cast.carol), "Shop", "shop", "python-http")


def persistence_table(page) -> dict[str, list[str]]:
    rows = page.locator("#persistence tbody tr")
    return {
        rows.nth(i).get_attribute("data-key"): rows.nth(i).locator("th, td").all_inner_texts()
        for i in range(rows.count())
    }


def off_loop(fn):
    """Database reads while Playwright's loop runs on this thread go on another."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(fn).result()


def assert_statement(page, session_id: str) -> None:
    """The page's table says what the statement says for the session as it is now."""
    said = off_loop(
        lambda: statement(Session.objects.select_related("run").get(public_id=session_id))
    )
    table = persistence_table(page)
    assert list(table) == list(PERSISTENCE_ROWS)
    for key, item in said.items():
        kept = "yes" if item["kept_now"] else "no"
        assert table[key] == [PERSISTENCE_ROWS[key], item["where"], item["survives"], kept]


def test_carol_opens_a_session_runs_commands_live_and_stops_it(berth_server, run_stack, cast, shop):
    with chromium_page() as page:
        sign_in_as_carol(page, berth_server, "/t/team-a/w/shop/")
        page.click(".tabs a:text-is('Sessions')")
        page.select_option("select[name=runtime]", "runc")
        with page.expect_navigation(url=re.compile(r"/sessions/[a-z0-9]+/$")):
            page.click("#open-session button[type=submit]")
        session_id = page.url.rstrip("/").rsplit("/", 1)[-1]
        page.evaluate("window.notReloaded = true")

        # Ready, told by the session's state socket: no reload.
        page.wait_for_selector("#session-status[data-state=ready]", timeout=RUN_TIMEOUT_MS)
        assert page.inner_text("#session-status .badge") == "ready"
        clocks = page.inner_text("#session-clocks")
        assert "Freezes at" in clocks and "Stops at" in clocks and "Deleted after" in clocks
        assert_statement(page, session_id)
        assert persistence_table(page)["processes_and_memory"][3] == "yes"

        # `echo hi`: its item arrives with a viewer on its log, and the line in it.
        page.fill("#exec-command", "echo hi")
        page.press("#exec-command", "Enter")
        first = page.locator("#execs .exec").first
        first.locator(".log-lines .line.stdout:text-is('hi')").wait_for(timeout=RUN_TIMEOUT_MS)
        first.locator(".badge.state-exit_zero").wait_for()
        assert "exit code 0" in first.inner_text()
        assert page.input_value("#exec-command") == ""
        assert page.locator("#no-execs").count() == 0

        # Live, not at the end: a command that waits prints before it ends, and a
        # second command, run beside it, lets it go on.
        page.fill(
            "#exec-command", "echo waiting; while [ ! -e /tmp/go ]; do sleep 0.1; done; echo went"
        )
        page.press("#exec-command", "Enter")
        page.locator("#execs .exec .line.stdout:text-is('waiting')").wait_for(
            timeout=RUN_TIMEOUT_MS
        )
        # By its id: the next command's item goes above it.
        waiting = page.locator("#" + page.locator("#execs .exec").first.get_attribute("id"))
        waits = off_loop(lambda: Exec.objects.get(command__startswith="echo waiting"))
        assert waits.is_active and waiting.locator(".line:text-is('went')").count() == 0
        assert waiting.locator("[data-log-status][data-kind=live]").count() == 1
        page.fill("#exec-command", "touch /tmp/go")
        page.press("#exec-command", "Enter")
        waiting.locator(".line.stdout:text-is('went')").wait_for(timeout=RUN_TIMEOUT_MS)
        waiting.locator(".badge.state-exit_zero").wait_for()
        assert page.locator("#execs .exec").count() == 3

        # Stopped from the page: the state moves on its own, and what survives with it.
        page.click("#session-status button:text-is('Stop')")
        page.wait_for_selector("#session-status[data-state=stopped]", timeout=RUN_TIMEOUT_MS)
        assert "closed" in page.inner_text("#session-status .state-line")
        assert persistence_table(page)["processes_and_memory"][3] == "no"
        assert persistence_table(page)["uncommitted_files"][3] == "yes"
        assert_statement(page, session_id)
        assert page.locator("#session-status button:text-is('Start again')").is_visible()
        assert page.evaluate("window.notReloaded") is True

        # Deleting asks first.
        page.click("#session-status button:text-is('Delete…')")
        page.click("#delete-session button:text-is('Delete session')")
        page.wait_for_selector("#session-status[data-state=deleted]", timeout=RUN_TIMEOUT_MS)
        assert persistence_table(page)["uncommitted_files"][3] == "no"

        page.click(".tabs a:text-is('Sessions')")
        row = page.locator("table.sessions tbody tr").first
        assert session_id in row.inner_text() and "deleted" in row.inner_text()
    assert Session.objects.get(public_id=session_id).requested_by == cast.carol
