"""The top bar on a narrow screen: the team's links fold behind a Menu button that a
keyboard opens and closes, and that says whether it is open."""

import pytest
from playwright.sync_api import expect

from tests.support.browser import chromium_page, serious_violations, sign_in_as

pytestmark = pytest.mark.browser


def test_on_a_narrow_screen_the_links_fold_behind_a_menu_the_keyboard_opens(berth_server, cast):
    with chromium_page() as page:
        page.set_viewport_size({"width": 390, "height": 800})
        sign_in_as(page, berth_server, "carol", "/t/team-a/")
        menu = page.get_by_role("button", name="Menu")
        activity = page.locator("header.top nav").get_by_role("link", name="Activity")
        expect(menu).to_be_visible()
        expect(menu).to_have_attribute("aria-expanded", "false")
        expect(activity).to_be_hidden()

        menu.focus()
        page.keyboard.press("Enter")
        expect(menu).to_have_attribute("aria-expanded", "true")
        expect(activity).to_be_visible()
        expect(page.get_by_role("button", name="Sign out")).to_be_visible()
        assert not serious_violations(page)

        page.keyboard.press("Tab")  # into the links the menu opened
        page.keyboard.press("Escape")
        expect(menu).to_have_attribute("aria-expanded", "false")
        expect(activity).to_be_hidden()
        expect(menu).to_be_focused()

        page.keyboard.press("Space")
        activity.click()
        page.wait_for_url("**/t/team-a/activity/")

        # On a wide screen nothing folds: the links show and the button does not.
        page.set_viewport_size({"width": 1280, "height": 800})
        expect(page.locator("header.top nav").get_by_role("link", name="Activity")).to_be_visible()
        expect(page.locator(".menu-button")).to_be_hidden()
