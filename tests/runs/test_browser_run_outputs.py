"""A run's outputs and its replay in a real Chromium, on the real stack: a refused
re-run stays said while the live log refreshes the status, and a replay's page shows
the comparison once it ends, without a reload."""

import pytest

from accounts.access import Actor
from runs import actions
from tests.support.browser import RUN_TIMEOUT_MS, chromium_page, sign_in_as_carol
from tests.support.runs import wait_ended, with_artifacts_toml
from workspaces.actions import create_workspace

pytestmark = [pytest.mark.browser, pytest.mark.docker]


@pytest.fixture
def shop(cast):
    return create_workspace(cast.team_a, Actor(cast.carol), "Shop", "shop", "python-http")


def test_carol_replays_a_run_from_its_page_and_sees_how_it_compares(
    berth_server, run_stack, cast, shop
):
    with_artifacts_toml(shop, cast)
    first = actions.start_run(
        shop,
        Actor(cast.carol),
        "mkdir -p dist && echo $GREETING > dist/greeting.txt",
        env={"GREETING": "hi"},
    )
    first = wait_ended(first.public_id)
    with chromium_page() as page:
        sign_in_as_carol(page, berth_server, f"/t/team-a/w/shop/runs/{first.public_id}/")
        assert page.inner_text("#run-status .badge") == "succeeded"
        assert page.locator(".run-artifacts a[download]").inner_text() == "dist/greeting.txt"
        page.click("#rerun button[type=submit]")
        # The viewer replays the log and refreshes #run-status at its end: the refusal,
        # outside that element, must still be there afterwards.
        page.wait_for_selector("[data-log-status]:has-text('Ended')")
        page.wait_for_load_state("networkidle")
        assert "give values for GREETING" in page.inner_text("#rerun-error")
        page.fill("input[name=env_GREETING]", "hey")
        page.click("#rerun button[type=submit]")
        page.wait_for_selector("#run-status[data-state=succeeded]", timeout=RUN_TIMEOUT_MS)
        compare = page.locator(".run-compare")
        assert f"run {first.public_id}" in compare.inner_text()
        assert "sha256 differs: dist/greeting.txt" in compare.inner_text()
        assert "skipped — dependency cache hit" in page.inner_text(".run-setup")
