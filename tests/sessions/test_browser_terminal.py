"""A terminal in a real Chromium: carol opens one beside the code on the workspace page
(a session is opened for it), types into a real shell in the sandbox, reloads the page
and finds her shell and its output still there, and keeps typing through a daphne crash
and restart without reloading: the page reconnects and shows what the shell printed
meanwhile. The session's own page shows the same terminal."""

import os
import signal

import pytest

from accounts.access import Actor
from tests.support import servers
from tests.support.browser import OUTPUT, RUN_TIMEOUT_MS, chromium_page, sign_in_as_carol
from workspaces.actions import create_workspace

pytestmark = [pytest.mark.browser, pytest.mark.docker]


@pytest.fixture
def shop(cast):
    return create_workspace(cast.team_a, Actor(cast.carol), "Shop", "shop", "python-http")


def screen_has(page, text: str, screen: str = "#side-terminal") -> None:
    # Looked at, as a person would: xterm.js draws nothing while out of view.
    page.locator(screen).scroll_into_view_if_needed()
    page.wait_for_function(
        "([s, t]) => document.querySelector(s + ' .xterm-rows')?.textContent.includes(t)",
        arg=[screen, text],
        timeout=RUN_TIMEOUT_MS,
    )


def type_line(page, line: str) -> None:
    page.click("#side-terminal .xterm-screen")
    # The keys go to the terminal (not the editor beside it) only once it has focus.
    page.wait_for_function("() => document.activeElement?.closest('#side-terminal') !== null")
    page.keyboard.type(line)
    page.keyboard.press("Enter")


def test_a_terminal_survives_a_reload_and_a_daphne_restart(run_stack, cast, shop):
    port, gateway = servers.free_port(), servers.free_port()
    first = servers.daphne(name="daphne-terminal", port=port, gateway_port=gateway)
    server = first.__enter__()
    running = [first]  # what the test must stop, whatever happens
    try:
        with chromium_page() as page:
            page.set_viewport_size({"width": 1400, "height": 900})
            sign_in_as_carol(page, server, "/t/team-a/w/shop/?path=app.py")
            page.click(".ws-terminal button:text-is('Terminal')")
            # Beside the code: the editor keeps its room.
            page.wait_for_selector("#side-pane [data-side-terminal][aria-selected=true]")
            assert page.locator("#editor").bounding_box()["height"] > 400
            # The session starts for it; the shell's prompt comes once it is ready.
            screen_has(page, "/workspace$")
            type_line(page, "X=kept; echo one-$((1+1))")
            screen_has(page, "one-2")

            # A reload: the same shell, its recent output drawn again.
            page.reload()
            screen_has(page, "one-2")
            type_line(page, "echo $X-$X")
            screen_has(page, "kept-kept")
            page.screenshot(path=str(OUTPUT / "terminal.png"))

            # Daphne dies while the shell is about to print; a new one starts on the
            # same port. The page, never reloaded, reconnects and shows the line.
            page.evaluate("window.notReloaded = true")
            type_line(page, "sleep 2; echo after-$((2+2))")
            screen_has(page, "sleep 2; echo after-$((2+2))")  # typed whole, Enter sent
            os.kill(server.pid, signal.SIGKILL)
            running.pop().__exit__(None, None, None)
            page.wait_for_selector("[data-side-status]:text('Reconnecting')")
            again = servers.daphne(name="daphne-terminal", port=port, gateway_port=gateway)
            again.__enter__()
            running.append(again)
            screen_has(page, "after-4")
            type_line(page, "echo $X-again")
            screen_has(page, "kept-again")
            assert page.evaluate("window.notReloaded") is True
            assert page.inner_text("[data-side-status]") == ""

            # The session's page has it too: the same shell, its output drawn again.
            page.click("[data-side-page]")
            page.wait_for_url("**/sessions/*/?terminal=*")
            assert page.locator(".terminal-tabs [aria-selected=true]").inner_text() == "Terminal 1"
            screen_has(page, "kept-again", screen="#terminal-screen")
    finally:
        for context in running:
            context.__exit__(None, None, None)
