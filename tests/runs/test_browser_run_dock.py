"""The workspace page's run area while a run runs, in a real Chromium, carried by a real
Celery worker and runner agent on Docker: a clock that counts, a Cancel that cancels
(the run page's door), and the typed end, all without a reload."""

import pytest
from playwright.sync_api import expect

from accounts.access import Actor
from tests.support.browser import RUN_TIMEOUT_MS, chromium_page, sign_in_as_carol
from workspaces.actions import create_workspace

pytestmark = [pytest.mark.browser, pytest.mark.docker]


@pytest.fixture
def shop(cast):
    return create_workspace(cast.team_a, Actor(cast.carol), "Shop", "shop", "python-http")


def test_the_dock_counts_while_a_run_runs_cancels_it_and_says_why_it_ended(
    berth_server, run_stack, cast, shop
):
    with chromium_page() as page:
        sign_in_as_carol(page, berth_server, "/t/team-a/w/shop/")
        page.evaluate("window.notReloaded = true")
        page.fill("#run-command", "echo waiting; sleep 300")
        page.press("#run-command", "Enter")
        dock = page.locator("#run-dock-body")
        dock.locator(".line.stdout", has_text="waiting").wait_for(timeout=RUN_TIMEOUT_MS)

        # The clock counts on its own while the run runs.
        clock = dock.locator("[data-run-elapsed]")
        expect(clock).to_have_attribute("data-ticking", "")
        before = clock.inner_text()
        expect(clock).not_to_have_text(before, timeout=5_000)
        assert clock.inner_text().endswith(" s")

        dock.get_by_role("button", name="Cancel").click()
        expect(dock.locator("[data-run-badge]")).to_have_text("cancelled", timeout=60_000)
        expect(dock.locator("[data-log-status]")).to_contain_text(
            "Ended: cancelled (cancelled by user)"
        )
        expect(dock.locator("[data-run-end]")).to_have_text("Cancelled by carol.")
        # Ended: the clock stops, and there is nothing left to cancel.
        expect(clock).not_to_have_attribute("data-ticking", "")
        expect(dock.get_by_role("button", name="Cancel")).to_have_count(0)
        assert page.evaluate("window.notReloaded") is True
