"""A preview of a session in a real Chromium: carol starts a server in her session from
its page, previews its port with the page's form, and sees the app in the preview's
frame; the session's page lists the preview. Real daphne, gateway, worker, agent, Docker."""

import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from accounts.access import Actor
from previews.models import Preview
from sessions import actions
from sessions.models import Session
from tests.support.browser import RUN_TIMEOUT_MS, chromium_page, sign_in_as_carol
from tests.support.servers import wait_for
from tests.support.sessions import SERVE

pytestmark = [pytest.mark.browser, pytest.mark.docker]


def off_loop(fn):
    """Database reads while Playwright's loop runs on this thread go on another."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(fn).result()


def test_carol_previews_a_server_of_her_session_from_its_page(berth_server, run_stack, cast, shop):
    session = actions.open_session(shop, Actor(cast.carol), runtime="runc")
    wait_for(
        lambda: Session.objects.get(pk=session.pk).state,
        120,
        what="the session to be ready",
        until=lambda state: state in ("ready", "failed"),
    )
    with chromium_page() as page:
        sign_in_as_carol(page, berth_server, f"/t/team-a/w/shop/sessions/{session.public_id}/")
        page.wait_for_selector("#session-status[data-state=ready]", timeout=RUN_TIMEOUT_MS)
        page.fill("#exec-command", SERVE)
        page.press("#exec-command", "Enter")
        page.locator("#execs .exec .badge.state-exit_zero").first.wait_for(timeout=RUN_TIMEOUT_MS)

        page.fill("#preview-port", "8080")
        with page.expect_navigation(url=re.compile(r"/previews/[a-z0-9]+/$")):
            page.click(".session-previews button[type=submit]")
        preview = off_loop(lambda: Preview.objects.get(session__pk=session.pk))
        page.wait_for_selector("#preview-status[data-state=ready]", timeout=RUN_TIMEOUT_MS)
        # The page says whose app it is, and what survives the session's stops.
        status = page.locator("#preview-status .session-preview-of")
        assert session.public_id in status.inner_text()
        assert "kept now" in status.locator("li[data-key=processes_and_memory]").inner_text()
        # The frame: the app's directory listing, served from the session's container.
        frame = page.frame_locator("#preview-frame")
        frame.locator("a", has_text="hi.txt").wait_for(timeout=30_000)

        page.goto(f"{berth_server.url}/t/team-a/w/shop/sessions/{session.public_id}/")
        listed = page.locator(".session-preview-list li").first
        assert preview.public_id in listed.inner_text() and "ready" in listed.inner_text()
