"""What the run page says, in a real Chromium on the real stack (issue 26, items 2, 8,
9): stderr marked quietly and red kept for what failed; a run that failed on the
network says how to allow its destination; no template comment leaks onto the page."""

import pytest

from accounts.access import Actor
from tests.support.browser import RUN_TIMEOUT_MS, chromium_page, sign_in_as_carol
from workspaces.actions import create_workspace

pytestmark = [pytest.mark.browser, pytest.mark.docker]

# The starter's two passing tests, and one more that fails, all reported on stderr.
FAILING_TEST = (
    "printf 'import unittest\\nclass T(unittest.TestCase):\\n"
    "    def test_no(self):\\n        self.assertEqual(1, 2)\\n' > test_no.py; "
    "python3 -m unittest -v"
)
URLOPEN = "python3 -c \"import urllib.request; urllib.request.urlopen('http://example.invalid')\""


@pytest.fixture
def shop(cast):
    return create_workspace(cast.team_a, Actor(cast.carol), "Shop", "shop", "python-http")


def colours(page, selector: str) -> list[dict]:
    return page.eval_on_selector_all(
        selector,
        """rows => rows.map(r => ({text: r.textContent, color: getComputedStyle(r).color,
            bar: getComputedStyle(r).borderLeftColor, classes: r.className}))""",
    )


def start(page, command: str) -> None:
    page.fill("#id_command", command)
    page.click(".command-row button[type=submit]")
    page.wait_for_selector("#run-status[data-state=failed]", timeout=RUN_TIMEOUT_MS)
    page.wait_for_selector(".log-status[data-kind=failed]")


def test_passing_tests_on_stderr_read_quietly_and_a_failure_in_red(
    berth_server, run_stack, cast, shop
):
    with chromium_page() as page:
        sign_in_as_carol(page, berth_server, "/t/team-a/w/shop/runs/")
        start(page, FAILING_TEST)
        stderr = {r["text"]: r for r in colours(page, ".log-lines .line.stderr")}
        passed = next(r for t, r in stderr.items() if t.startswith("test_it_greets_by_name"))
        stdout_colour = page.evaluate("getComputedStyle(document.querySelector('.log')).color")
        # A pass on stderr: the log's own colour, a quiet bar at its left.
        assert "failure" not in passed["classes"] and passed["color"] == stdout_colour
        assert passed["bar"] == "rgb(77, 90, 104)"
        # What failed is red, whichever stream said it.
        for text in ("FAILED (failures=1)", "AssertionError: 1 != 2"):
            line = stderr[text]
            assert "failure" in line["classes"] and line["color"] == "rgb(255, 180, 168)"
        verdict = next(r for t, r in stderr.items() if t.startswith("test_no ") and "FAIL" in t)
        assert "failure" in verdict["classes"]
        legend = page.inner_text(".log-bar .legend")
        assert "stderr" in legend and "failure" in legend

        # Item 9: the page ends with what it shows, never a template comment.
        assert "{#" not in page.content() and "#}" not in page.inner_text("body")


def test_a_run_without_network_says_so_and_shows_the_block_to_add(
    berth_server, run_stack, cast, shop
):
    with chromium_page() as page:
        sign_in_as_carol(page, berth_server, "/t/team-a/w/shop/runs/")
        start(page, URLOPEN)
        message = page.inner_text(".run-message")
        assert message.startswith("The command exited with code 1: it tried to reach the network")
        assert "this sandbox had no network" in message and "Fix [setup]" not in message
        box = page.locator("#network-failure")
        assert box.get_attribute("data-kind") == "no_network"
        assert "No network in the sandbox." in box.inner_text()
        assert "The team's egress ceiling must allow the host too" in box.inner_text()
        # Nothing named a host: the block says where one goes.
        assert page.inner_text(".network-toml") == '[network]\negress = ["<the host it needs>"]'
        assert box.locator("a", has_text="workspace.toml").get_attribute("href") == (
            "/t/team-a/w/shop/?path=workspace.toml"
        )
        # The same page, reloaded after the end (the run's status partial swapped in).
        page.reload()
        page.wait_for_selector("#network-failure[data-kind=no_network]")
