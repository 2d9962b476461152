"""A sandbox contract typed in the editor in a real Chromium (issue 32, items 5 and 6):
a reviewer's widening says it waits for review, with its link; their narrowing says it
is the approved contract now."""

import pytest

from accounts.access import Actor
from tests.support.browser import chromium_page
from workspaces import actions as workspace_actions
from workspaces.changes import Change
from workspaces.models import ContractReview, ReviewState

pytestmark = pytest.mark.browser


def test_a_reviewer_types_a_wider_then_a_narrower_contract_and_is_told_each(berth_server, cast):
    shop = workspace_actions.create_workspace(cast.team_a, Actor(cast.alice), "Shop", "shop")
    empty = Change("write", "workspace.toml", b"# How Berth runs this workspace.\n")
    workspace_actions.commit_changes(shop, Actor(cast.alice), [empty], "an empty contract")
    with chromium_page() as page:
        page.goto(f"{berth_server.url}/")
        page.fill("input[name=username]", "bob")
        page.fill("input[name=password]", "bob-password-1")
        page.click("button[type=submit]")
        page.wait_for_url("**/t/team-a/")

        page.goto(f"{berth_server.url}/t/team-a/w/shop/?ref=main&path=workspace.toml")
        page.wait_for_selector(".cm-editor .cm-content")

        page.click(".cm-content")
        page.keyboard.press("Control+End")
        page.keyboard.type("[sandbox]\nmemory_mb = 2048\n")
        page.keyboard.press("Control+s")
        page.wait_for_selector("#save-status.ok")
        status = page.inner_text("#save-status")
        assert "The wider sandbox contract waits for review" in status
        link = page.get_attribute("#save-status a[href*=contract-reviews]", "href")

        page.click(".cm-content")
        page.keyboard.press("Control+a")
        page.keyboard.press("Backspace")  # typed over a selection, "[" would wrap it
        page.keyboard.type("[sandbox]\nmemory_mb = 256\n")
        page.keyboard.press("Control+s")
        page.wait_for_function(
            "document.getElementById('save-status').innerText.includes('is approved')"
        )
    # (The database is read once the browser is closed: its loop makes this thread async.)
    review = ContractReview.objects.get(values__memory_mb=2048)
    assert (review.state, link) == (ReviewState.PENDING, review.url)
    assert ContractReview.objects.get(values__memory_mb=256).state == ReviewState.APPROVED
