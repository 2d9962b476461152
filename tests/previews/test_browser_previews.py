"""A preview in real Chromium: started from the workspace page, shown in the preview
page's frame (a third-party context: the preview host is another site than the app)
and opened in a new tab. Real daphne, Celery worker, runner agent, Docker."""

import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from accounts.access import Actor
from previews.models import Preview
from tests.support.browser import chromium_page, sign_in_as_carol
from tests.support.previews import PROBE_APP, probe_toml, write
from tests.support.servers import wait_for
from workspaces.actions import create_workspace

pytestmark = [pytest.mark.browser, pytest.mark.docker]


@pytest.fixture
def probe(cast):
    workspace = create_workspace(cast.team_a, Actor(cast.carol), "Probe", "probe")
    write(workspace, cast.carol, {"probe_app.py": PROBE_APP, "workspace.toml": probe_toml()})
    return workspace


def test_carol_opens_her_preview_in_the_frame_and_in_a_new_tab(
    berth_server, run_stack, cast, probe
):
    with chromium_page() as page:
        sign_in_as_carol(page, berth_server, "/t/team-a/w/probe/")
        with page.expect_navigation(url=re.compile(r"/previews/[a-z0-9]+/$")):
            page.click("[data-start-preview]")
        # The ORM refuses to run on Playwright's event loop thread: ask from another.
        with ThreadPoolExecutor(1) as pool:
            preview = pool.submit(lambda: Preview.objects.get(workspace=probe)).result()
        page.wait_for_selector("#preview-status[data-state=ready]", timeout=120_000)

        # The frame: app page → /open (access check) → ticket on the preview host →
        # its partitioned cookie → the app, once the "starting" page reloads itself.
        frame = page.frame_locator("#preview-frame")
        frame.locator("h1", has_text="probe app").wait_for(timeout=30_000)
        inner = next(f for f in page.frames if preview.host in f.url)
        assert inner.url == f"http://{preview.host}:{berth_server.gateway_port}/"

        # A new tab: the same ticket exchange, top level.
        with page.context.expect_page() as opened:
            page.click("text=Open in new tab")
        tab = opened.value
        tab.wait_for_load_state()
        assert tab.url == f"http://{preview.host}:{berth_server.gateway_port}/"
        assert tab.locator("h1").inner_text() == "probe app"

        # The app's own page in that tab never got Berth's session cookie.
        headers = tab.evaluate("fetch('/headers').then(r => r.json())")
        assert "sessionid" not in headers.get("cookie", "")
        assert "berth_preview" not in headers.get("cookie", "")

        # The workspace page's side pane: the same frame, state and log, beside the code.
        page.set_viewport_size({"width": 1400, "height": 900})
        page.goto(f"{berth_server.url}/t/team-a/w/probe/")
        page.click("[data-open-side-preview]")
        page.frame_locator("#side-pane iframe").locator("h1", has_text="probe app").wait_for(
            timeout=30_000
        )
        assert page.inner_text("#side-pane [data-preview-state]") == "ready"
        page.locator("#side-pane .log-lines", has_text="probe app listening").wait_for()
        # The code keeps its room: side by side, not squeezed above.
        editor, side = page.locator(".ide-body > .pane"), page.locator("#side-pane")
        assert editor.bounding_box()["height"] > 500 and side.bounding_box()["width"] > 280
        # The address bar says where the app's own link took the frame, as the gateway
        # saw it (Berth's page cannot read a cross-origin frame's location).
        app = next(f for f in page.frames if preview.host in f.url)
        app.evaluate("location.assign('/headers?from=the-app')")
        page.wait_for_function(
            "() => document.querySelector('#preview-address').value === '/headers?from=the-app'"
        )
        # Reload loads that same address again.
        page.click("[data-address-reload]")
        page.wait_for_function(
            "() => document.querySelector('#side-pane iframe').src.includes('next=%2Fheaders')"
        )
        # The split is set with the keyboard and kept, with the preview, across a reload.
        page.focus(".splitter")
        before = int(page.get_attribute(".splitter", "aria-valuenow"))
        page.keyboard.press("ArrowLeft")
        wider = int(page.get_attribute(".splitter", "aria-valuenow"))
        assert wider == before + 40
        page.reload()
        page.frame_locator("#side-pane iframe").locator("body").wait_for(timeout=30_000)
        assert int(page.get_attribute(".splitter", "aria-valuenow")) == wider

        # Stop from the preview page: the tab now gets the typed page.
        page.goto(f"{berth_server.url}/previews/{preview.public_id}/")
        page.click("#preview-status button.danger")
        page.wait_for_selector("#preview-status[data-state=stopped]", timeout=30_000)
        # (the proxy may have the preview's state cached for up to a second)

        def stopped_page_shown() -> bool:
            if "This preview is stopped" in tab.locator("h1").inner_text():
                return True
            tab.reload()
            return False

        wait_for(stopped_page_shown, 15, interval=0, what="the tab to show the stopped page")
        assert "Restart" in tab.locator("a.button").inner_text()


def test_a_crash_shows_in_the_pane_by_itself_and_a_restart_brings_the_app_back(
    berth_server, cast, ready
):
    from runs.models import Run
    from sandbox.engine import engine

    def kill() -> None:
        run = Run.objects.get(public_id=ready["run"])
        engine().containers.get(run.container_name).kill("SIGKILL")

    with chromium_page() as page:
        page.set_viewport_size({"width": 1400, "height": 900})
        sign_in_as_carol(page, berth_server, "/t/team-a/w/probe/")
        page.evaluate("window.notReloaded = true")
        page.click("[data-open-side-preview]")
        frame = page.frame_locator("#side-pane iframe")
        frame.locator("h1", has_text="probe app").wait_for(timeout=30_000)

        with ThreadPoolExecutor(1) as pool:  # the ORM, off Playwright's event loop
            pool.submit(kill).result()

        # Nobody reloads: the pane hears the crash and loads the frame again, where the
        # gateway says so, with the log's last lines and a way to restart.
        frame.locator("h1", has_text="This preview crashed").wait_for(timeout=30_000)
        assert "The last lines of its log" in frame.locator("body").inner_text()
        assert "Restart" in frame.locator("a.button").inner_text()
        state = page.locator("#side-pane [data-preview-state]")
        state.filter(has_text="crashed").wait_for(timeout=15_000)
        assert "process_exited" in page.inner_text("#side-pane #preview-status")
        assert page.evaluate("window.notReloaded") is True

        # Restart from the pane: the page stays, and the frame shows the app once ready.
        page.click("#side-pane #preview-status button:text-is('Restart')")
        state.filter(has_text="ready").wait_for(timeout=120_000)
        frame.locator("h1", has_text="probe app").wait_for(timeout=30_000)
        page.locator("#side-pane .log-lines", has_text="probe app listening").wait_for()
        assert page.evaluate("window.notReloaded") is True
