"""Headless Chromium (Debian's) driven by Playwright, with the flags this machine needs."""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from shutil import which

from playwright.sync_api import Page, sync_playwright

from tests.support import marks

# Screenshots the browser tests take (the README's come from here), kept after a run.
OUTPUT = Path(__file__).resolve().parents[2] / "var" / "test-output"

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    # Without these Chromium keeps calling home, which this closed network refuses.
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Playwright turns Chromium's storage partitioning off (its --disable-features list,
# playwright#32230), and without it a third-party frame's localStorage is refused
# outright ("Access is denied") where third-party cookies are blocked, as in these
# contexts. Chrome ships with it on: a frame of another site gets storage of its own,
# keyed by the top-level site. The last --disable-features on a command line wins, so
# this one (Playwright's list minus ThirdPartyStoragePartitioning) restores it.
AS_CHROME_SHIPS = [
    "--disable-features=AvoidUnnecessaryBeforeUnloadCheckSync,DestroyProfileOnBrowserClose,"
    "HttpsUpgrades,HttpsFirstBalancedModeAutoEnable,LensOverlay,MediaRouter,PaintHolding,"
    "AvoidCorsURLLoaderRestartOnRedirect,OptimizationHints,NetworkTimeServiceQuerying,"
    "PreconnectToSearch"
]


@contextmanager
def chromium_page(partitioned_storage: bool = False) -> Iterator[Page]:
    """A page in a fresh context; `partitioned_storage`: with third-party frames'
    storage as Chrome ships it (AS_CHROME_SHIPS)."""
    marks.require("Chromium", "browser")
    executable = which("chromium") or which("chromium-browser")
    assert executable, "Chromium is not installed; `make test` installs it"
    args = CHROMIUM_ARGS + (AS_CHROME_SHIPS if partitioned_storage else [])
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=args)
        try:
            page = browser.new_page()
            page.set_default_timeout(15_000)
            yield page
        finally:
            browser.close()


@contextmanager
def chromium_pages(count: int) -> Iterator[list[Page]]:
    """Pages in separate browser contexts: people with sessions of their own."""
    marks.require("Chromium", "browser")
    executable = which("chromium") or which("chromium-browser")
    assert executable, "Chromium is not installed; `make test` installs it"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            pages = [browser.new_context().new_page() for _ in range(count)]
            for page in pages:
                page.set_default_timeout(15_000)
            yield pages
        finally:
            browser.close()


RUN_TIMEOUT_MS = 120_000


def sign_in_as_carol(page, server, next_path: str) -> None:
    sign_in_as(page, server, "carol", next_path)


AXE = Path(__file__).parent / "vendor" / "axe.min.js"  # axe-core 4.14.1, from npm (MPL-2.0)


def serious_violations(page: Page, within: str | None = None) -> list[dict]:
    """What axe-core finds on the page as it stands (or in the element `within` selects),
    serious or critical only, each with the first few elements it names."""
    page.add_script_tag(path=str(AXE))
    found = page.evaluate(
        """async (within) => (await axe.run(within ? document.querySelector(within) : document))
          .violations.map(v => ({
            id: v.id, impact: v.impact, help: v.help,
            nodes: v.nodes.slice(0, 5).map(n => n.target.join(" ")),
        }))""",
        within,
    )
    return [v for v in found if v["impact"] in ("serious", "critical")]


def sign_in_as(page, server, username: str, next_path: str) -> None:
    """A member of the test cast (tests.support.fixtures), signed in on the page."""
    page.goto(f"{server.url}/signin/?next={next_path}")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", f"{username}-password-1")
    page.click("button[type=submit]")
    page.wait_for_url(f"**{next_path}")
