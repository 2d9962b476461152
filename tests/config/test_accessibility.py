"""An automated accessibility check (axe-core, in Chromium) on the pages a person works
in all day: the workspace with a file open, a run, and a deploy's review. No serious or
critical violation (colour contrast included) may be found on any of them, in the light
scheme or the dark one the system may ask for."""

import pytest

from accounts.access import Actor
from deploys import actions as deploys
from logs.logstore import LogWriter
from runs.models import Run
from tests.support.browser import chromium_page, serious_violations, sign_in_as
from tests.support.runs import make_run
from workspaces import actions as workspaces

pytestmark = pytest.mark.browser


@pytest.fixture
def shop(cast):
    return workspaces.create_workspace(
        cast.team_a, Actor(cast.alice), "Shop", "shop", "python-http"
    )


@pytest.fixture
def ended_run(cast, shop) -> Run:
    """A run as its runner agent leaves it: a log with both streams, and its end."""
    run = make_run(shop, cast.carol, state="failed", reason="exit_nonzero", exit_code=1)
    with LogWriter(run.public_id) as log:
        log.append("stdout", b"test_app ... ok\n", None)
        log.append("stderr", b'  File "app.py", line 3, in <module>\nNameError: x\n', None)
    return run


def assert_accessible(page, what: str) -> None:
    found = serious_violations(page)
    assert not found, f"{what}: {found}"


# What each scheme paints: the page's background and the editor's.
BACKGROUNDS = {
    "light": ("rgb(246, 247, 249)", "rgb(255, 255, 255)"),
    "dark": ("rgb(13, 17, 23)", "rgb(22, 27, 34)"),
}


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_workspace_run_and_review_pages_have_no_serious_violations(
    berth_server, cast, shop, ended_run, scheme
):
    asked = deploys.request_deploy(shop, Actor(cast.carol), note="ship it")
    with chromium_page() as page:
        page.emulate_media(color_scheme=scheme)
        sign_in_as(page, berth_server, "bob", "/t/team-a/w/shop/?path=app.py")
        page.wait_for_selector("#editor .cm-content")
        painted = page.evaluate(
            """() => [getComputedStyle(document.body).backgroundColor,
                      getComputedStyle(document.querySelector('.cm-editor')).backgroundColor]"""
        )
        assert tuple(painted) == BACKGROUNDS[scheme]
        assert_accessible(page, f"the workspace page ({scheme})")
        # The finders drawn over it: the search panel with its hits, and quick open.
        page.locator("[data-search-toggle]").click()
        page.fill("#search-q", "greeting")
        page.keyboard.press("Enter")
        page.locator("#search-results mark").first.wait_for()
        assert_accessible(page, f"the search panel ({scheme})")
        page.locator("#search-results .search-hit").first.focus()
        page.keyboard.press("Control+p")
        page.wait_for_selector("#quick-open[open] [role=option][aria-selected=true]")
        assert_accessible(page, f"quick open ({scheme})")
        page.goto(f"{berth_server.url}/t/team-a/w/shop/runs/{ended_run.public_id}/")
        page.wait_for_selector(".log-lines .line")
        assert_accessible(page, f"the run page ({scheme})")
        page.goto(f"{berth_server.url}/t/team-a/w/shop/deploys/{asked.public_id}/")
        page.wait_for_selector("text=Approve and release")
        assert_accessible(page, f"the deploy review page ({scheme})")


# The team's and the workspace's other pages, each read in both schemes.
OTHER_PAGES = [
    "/t/team-a/",
    "/t/team-a/activity/",
    "/t/team-a/members/",
    "/t/team-a/tokens/",
    "/t/team-a/usage/",
    "/t/team-a/w/shop/history/",
    "/t/team-a/w/shop/settings/",
    "/t/team-a/w/shop/runs/",
    "/t/team-a/w/shop/sessions/",
    "/t/team-a/w/shop/deploys/",
    "/t/team-a/w/shop/contract-reviews/",
]


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_other_page_reads_in_both_schemes(berth_server, cast, shop, scheme):
    found = {}
    with chromium_page() as page:
        page.emulate_media(color_scheme=scheme)
        page.goto(f"{berth_server.url}/signin/")
        page.wait_for_selector("input[name=username]")
        if violations := serious_violations(page):
            found["/signin/"] = violations
        sign_in_as(page, berth_server, "alice", "/t/team-a/")
        for path in OTHER_PAGES:
            page.goto(f"{berth_server.url}{path}")
            page.wait_for_load_state("networkidle")
            if violations := serious_violations(page):
                found[path] = violations
    assert not found, found
