"""Headless Chromium (Debian's) driven by Playwright, with the flags this machine needs."""

from collections.abc import Iterator
from contextlib import contextmanager
from shutil import which

from playwright.sync_api import Page, sync_playwright

CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    # Without these Chromium keeps calling home, which this closed network refuses.
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


@contextmanager
def chromium_page() -> Iterator[Page]:
    executable = which("chromium") or which("chromium-browser")
    assert executable, "Chromium is not installed; `make test` installs it"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.set_default_timeout(15_000)
            yield page
        finally:
            browser.close()


@contextmanager
def chromium_pages(count: int) -> Iterator[list[Page]]:
    """Pages in separate browser contexts: people with sessions of their own."""
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
