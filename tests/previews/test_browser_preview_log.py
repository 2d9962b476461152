"""A preview's log in a real Chromium (issue 26, item 8): the app's access log of Berth's
health checks is counted, not shown; a viewer's own requests are. The static-site
starter's server (`python3 -m http.server`) logs every request, on stderr. Real
daphne, gateway, Celery worker, runner agent and Docker."""

import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from accounts.access import Actor
from logs import logstore
from previews.models import Preview
from tests.support.browser import chromium_page, sign_in_as_carol
from workspaces.actions import create_workspace

pytestmark = [pytest.mark.browser, pytest.mark.docker]

HIDDEN = re.compile(r"^(\d+) health checks? hidden$")


@pytest.fixture
def site(cast):
    return create_workspace(cast.team_a, Actor(cast.carol), "Site", "site", "static-site")


def hidden_count(page) -> int:
    text = page.inner_text("[data-health-hidden]")
    match = HIDDEN.match(text)
    assert match, text
    return int(match.group(1))


def test_health_checks_are_counted_not_shown_and_a_viewers_requests_are(
    berth_server, run_stack, cast, site
):
    with chromium_page() as page:
        sign_in_as_carol(page, berth_server, "/t/team-a/w/site/")
        with page.expect_navigation(url=re.compile(r"/previews/[a-z0-9]+/$")):
            page.click("[data-start-preview]")
        page.wait_for_selector("#preview-status[data-state=ready]", timeout=120_000)
        page.frame_locator("#preview-frame").locator("body").wait_for(timeout=30_000)

        # The frame's own request, through the gateway: shown.
        log = page.locator(".log-lines")
        log.locator(".line", has_text='"GET / HTTP/1.1" 200').first.wait_for(timeout=30_000)
        # The probe that found it ready, and one of the every-5-s ones after it: counted.
        page.wait_for_function(
            """() => {
                const note = document.querySelector('[data-health-hidden]');
                return !note.hidden && parseInt(note.textContent, 10) >= 2;
            }""",
            timeout=30_000,
        )
        assert "health check" in page.locator("[data-health-hidden]").get_attribute("title")
        shown = log.locator(".line").all_inner_texts()
        assert not [line for line in shown if "HTTP/1.0" in line]
        hidden = hidden_count(page)

        # They are in the log all the same (the API serves every line); the view only
        # left out as many as it says.
        def stored() -> list[str]:
            run = Preview.objects.select_related("run").get(workspace=site).run
            assert run is not None
            entries = logstore.read(run.public_id, 0, 10_000)
            return [e["text"] for e in entries if '"GET / HTTP/1.0"' in e["text"]]

        with ThreadPoolExecutor(1) as pool:
            probes = pool.submit(stored).result()
        assert len(probes) >= hidden >= 2

        # Opened again: the whole log replayed, its health checks counted once more.
        page.reload()
        page.wait_for_selector("[data-health-hidden]:not([hidden])")
        assert hidden_count(page) >= hidden
        assert not [t for t in log.locator(".line").all_inner_texts() if "HTTP/1.0" in t]
