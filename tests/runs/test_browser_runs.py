"""Runs in a real Chromium, carried by a real Celery worker and runner agent on Docker:
the Runs tab, the live log over the WebSocket, the state without a reload, the dock."""

import json
import re
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.conf import settings

from accounts.access import Actor
from runs.models import Run
from tests.support.browser import RUN_TIMEOUT_MS, chromium_page, sign_in_as_carol
from workspaces.actions import create_workspace
from workspaces.store import open_store

pytestmark = [pytest.mark.browser, pytest.mark.docker]

COMMAND = r"printf '\033[31mred\033[0m <b>not bold</b>\n'; python3 -m unittest -v"
ACTIVE = ("queued", "preparing", "running")


@pytest.fixture
def shop(cast):
    return create_workspace(cast.team_a, Actor(cast.carol), "Shop", "shop", "python-http")


def test_carol_runs_the_tests_and_watches_the_log_live(berth_server, run_stack, cast, shop):
    with chromium_page() as page:
        sign_in_as_carol(page, berth_server, "/t/team-a/w/shop/runs/")
        assert page.locator(".tabs a[aria-current=page]").inner_text() == "Runs"
        page.fill("#id_command", COMMAND)
        with page.expect_navigation(url=re.compile(r"/runs/[a-z0-9]+/$")) as navigation:
            page.click(".command-row button[type=submit]")
        # The page was served while the run was still active: what follows arrives live.
        first = navigation.value.text()
        assert re.search(r'<div id="run-status" data-state="(queued|preparing|running)"', first)
        page.evaluate("window.notReloaded = true")

        page.wait_for_selector("#run-status[data-state=succeeded]", timeout=RUN_TIMEOUT_MS)
        assert page.evaluate("window.notReloaded") is True
        assert page.inner_text("#run-status .badge") == "succeeded"
        assert "The command exited with code 0." in page.inner_text(".run-message")
        assert "exit code 0" in page.inner_text(".state-line")
        assert page.locator(".log-status[data-kind=succeeded]").is_visible()
        # Refreshed with the end: the isolation the engine applied, every timing.
        facts = page.inner_text(".run-facts")
        assert re.search(r"Read-only root\s+yes", facts) and re.search(r"Network\s+none", facts)
        assert "Process started" in facts and "Finished" in facts
        assert page.locator("form[action$='/cancel/']").count() == 0

        log = page.locator(".log-lines")
        # Escaped, never markup: the command's <b> is text, "red" is a coloured span.
        assert page.locator(".log-lines b").count() == 0
        assert log.locator(".line.stdout").first.inner_text() == "red <b>not bold</b>"
        assert log.locator("span.ansi-fg-1").inner_text() == "red"
        # unittest reports on stderr: tinted lines of their own.
        stderr = log.locator(".line.stderr").all_inner_texts()
        assert any(line.startswith("Ran ") for line in stderr) and "OK" in stderr
        count = log.locator(".line").count()
        page.set_viewport_size({"width": 1280, "height": 1150})  # the facts column too
        page.screenshot(path="/tmp/run.png")

        # Opened again after the end: the log is replayed once, from the start.
        page.reload()
        page.wait_for_selector(".log-status[data-kind=succeeded]")
        assert page.locator(".log-lines .line").count() == count

        page.click(".tabs a:text-is('Runs')")
        row = page.locator("table.runs tbody tr").first
        assert "succeeded" in row.inner_text() and "exit_zero" in row.inner_text()
    run = Run.objects.get()
    assert (run.state, run.requested_by) == ("succeeded", cast.carol)


def test_the_dock_under_the_editor_runs_a_command_and_shows_its_log(
    berth_server, run_stack, cast, shop
):
    with chromium_page() as page:
        sign_in_as_carol(page, berth_server, "/t/team-a/w/shop/")
        assert page.is_hidden("#run-dock-body")
        page.fill("#run-command", "echo from the dock; echo oops >&2; exit 4")
        page.press("#run-command", "Enter")
        page.wait_for_selector(
            "#run-dock-body [data-run-badge].state-failed", timeout=RUN_TIMEOUT_MS
        )
        # Two pipes: which of stdout and stderr Docker saw first is not fixed.
        lines = page.locator("#run-dock-body .log-lines")
        assert lines.locator(".line.stdout").all_inner_texts() == ["from the dock"]
        assert lines.locator(".line.stderr").all_inner_texts() == ["oops"]
        assert "exit code 4" in page.inner_text("#run-dock-body [data-log-status]")
        page.click("[data-dock-toggle]")
        assert page.is_hidden("#run-dock-body")
        page.click("[data-dock-toggle]")
        page.click("#run-dock-body a:text-is('Open run')")
        page.wait_for_selector("#run-status[data-state=failed]")
        assert "exit_nonzero" in page.inner_text("#run-status")


# Records every WebSocket the page opens, so a test can drop one as a network would.
TRACK_SOCKETS = """
window.openedSockets = [];
const Native = window.WebSocket;
window.WebSocket = function (url, protocols) {
  const socket = new Native(url, protocols);
  window.openedSockets.push(socket);
  return socket;
};
window.WebSocket.prototype = Native.prototype;
"""


def test_the_log_follows_unless_scrolled_up_and_resumes_after_a_dropped_connection(
    berth_server, run_stack, cast, shop
):
    at_bottom = "(el) => el.scrollTop + el.clientHeight >= el.scrollHeight - 8"
    with chromium_page() as page:
        page.add_init_script(TRACK_SOCKETS)
        sign_in_as_carol(page, berth_server, "/t/team-a/w/shop/runs/")
        page.fill("#id_command", "seq -f 'line %g' 1 200; sleep 4; seq -f 'line %g' 201 400")
        page.click(".command-row button[type=submit]")
        log = page.locator(".log-lines")
        page.wait_for_selector(".log-lines .line:text-is('line 200')", timeout=RUN_TIMEOUT_MS)
        assert log.evaluate(at_bottom)
        # Carol scrolls up to read; the connection drops (as a network would drop it).
        log.hover()
        page.mouse.wheel(0, -100_000)
        page.wait_for_function("document.querySelector('.log-lines').scrollTop === 0")
        page.evaluate("window.openedSockets.at(-1).close()")
        page.wait_for_selector("#run-status[data-state=succeeded]", timeout=RUN_TIMEOUT_MS)
        # Each line once: the new socket asked only for what came after line 200.
        # Past the template's "[setup] …" system lines, the command's own, all of them.
        assert log.locator(".line:not(.system)").all_inner_texts() == [
            f"line {i}" for i in range(1, 401)
        ]
        urls = page.evaluate("window.openedSockets.map((s) => s.url)")
        assert len(urls) == 2 and urls[0].endswith("?after=0")
        # The cursor counts every entry shown, the "[setup] …" system lines included.
        setup_lines = log.locator(".line.system").count()
        assert urls[1].endswith(f"?after={200 + setup_lines}")
        assert urls[1].startswith("ws://localhost:")
        # She stayed where she was reading; the button takes her to the end.
        assert log.evaluate("(el) => el.scrollTop") == 0
        page.click("[data-log-jump]")
        assert log.evaluate(at_bottom) and page.is_hidden("[data-log-jump]")


def test_cancel_of_a_queued_run_ends_its_page_without_a_reload(berth_server, cast, shop):
    with open_store(shop) as store:
        commit = store.branch_head("main")
    # A team limit of 0: the run waits for admission until cancelled, whatever worker
    # or agent of another test is about.
    cast.team_a.max_concurrent_runs = 0
    cast.team_a.save()
    run = Run.objects.create(
        workspace=shop,
        ref="main",
        commit=commit,
        command="sleep 60",
        image=settings.SANDBOX_IMAGE,
        limits={"timeout_s": 600},
        requested_by=cast.carol,
    )
    with chromium_page() as page:
        sign_in_as_carol(page, berth_server, f"/t/team-a/w/shop/runs/{run.public_id}/")
        page.wait_for_selector(".log-status[data-kind=live]")
        # Never admitted: it says what it waits for.
        assert "its limit of 0" in page.inner_text(".run-message")
        page.evaluate("window.notReloaded = true")
        page.click("text=Cancel run")
        page.wait_for_selector("#run-status[data-state=cancelled]")
        assert page.inner_text(".run-message") == "Cancelled by carol."
        # The viewer learns the end too (a fresh socket replays it), not only the status.
        page.wait_for_selector(".log-status[data-kind=cancelled]")
        assert page.evaluate("window.notReloaded") is True
    run.refresh_from_db()
    assert (run.state, run.reason) == ("cancelled", "cancelled_by_user")


def off_loop(fn):
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(fn).result()


def test_the_end_lands_even_while_an_earlier_status_refresh_is_in_flight(berth_server, cast, shop):
    """The first output and the end come close together for a quick command: the status
    refresh the end asks for must not be lost behind the one the first output asked for."""
    with open_store(shop) as store:
        commit = store.branch_head("main")
    run = Run.objects.create(
        workspace=shop,
        ref="main",
        commit=commit,
        command="true",
        image=settings.SANDBOX_IMAGE,
        limits={"timeout_s": 600},
        requested_by=cast.carol,
        state="preparing",
    )
    page_path = f"/t/team-a/w/shop/runs/{run.public_id}/"
    held, sockets = [], []

    def status(route):
        # The first refresh is answered by the server now (the run still running) but
        # delivered to the page only after the end has arrived.
        if route.request.headers.get("hx-request") and not held:
            held.append((route, route.fetch()))
        else:
            route.continue_()

    with chromium_page() as page:
        page.route(f"**{page_path}", status)
        page.route_web_socket(re.compile(r"/ws/runs/"), lambda ws: sockets.append(ws))
        sign_in_as_carol(page, berth_server, page_path)
        page.wait_for_selector(".log-status[data-kind=live]")
        # The ORM refuses to run beside Playwright's event loop; a thread of its own may.
        off_loop(lambda: Run.objects.filter(pk=run.pk).update(state="running"))
        sockets[0].send(
            json.dumps(
                {
                    "type": "entries",
                    "next": 1,
                    "entries": [{"seq": 1, "stream": "stdout", "text": "done"}],
                }
            )
        )
        while not held:
            page.wait_for_timeout(20)
        off_loop(
            lambda: Run.objects.get(pk=run.pk).finish(
                "succeeded", "exit_zero", "The command exited with code 0.", 0
            )
        )
        sockets[0].send(
            json.dumps({"type": "end", "state": "succeeded", "reason": "exit_zero", "exit_code": 0})
        )
        page.wait_for_timeout(300)
        route, response = held[0]
        route.fulfill(response=response)
        page.wait_for_selector("#run-status[data-state=succeeded]", timeout=5_000)


def test_the_ansi_parser_keeps_colours_and_drops_everything_else(berth_server, cast, shop):
    cases = {
        "hyperlink": "see \x1b]8;;https://evil.example/x\x1b\\the docs\x1b]8;;\x1b\\ now",
        "title": "\x1b]0;pwned\x07after",
        "clear": "\x1b[2J\x1b[H\x1b[?25lcleared\x1b[K",
        "progress": " 10% [#     ]\r 55% [###   ]\r100% [######]",
        "crlf": "windows line\r",
        "script": "<script>alert(1)</script><img src=x onerror=alert(2)>",
        "colours": "\x1b[1;31mbold red\x1b[0m \x1b[92mbright\x1b[39m plain",
        "extended": "\x1b[38;5;196ma\x1b[38;2;1;2;3mb\x1b[48;5;244mc",
        "backspace": "ab\bc",
        "unterminated": "ok\x1b[31",
    }
    with chromium_page() as page:
        sign_in_as_carol(page, berth_server, "/t/team-a/w/shop/")
        got = page.evaluate(
            """(cases) => Object.fromEntries(Object.entries(cases).map(
            ([k, t]) => [k, BerthAnsi.parse(t).spans.map(
                (s) => [s.text, s.style.fg, s.style.bg, s.style.bold])]))""",
            cases,
        )
        carried = page.evaluate("""() => {
            const first = BerthAnsi.parse("\\x1b[32mgreen starts");
            return BerthAnsi.parse("and goes on", first.style).spans[0].style.fg; }""")
    assert got["hyperlink"] == [["see the docs now", None, None, False]]
    assert got["title"] == [["after", None, None, False]]
    assert got["clear"] == [["cleared", None, None, False]]
    assert got["progress"] == [["100% [######]", None, None, False]]
    assert got["crlf"] == [["windows line", None, None, False]]
    assert got["script"] == [
        ["<script>alert(1)</script><img src=x onerror=alert(2)>", None, None, False]
    ]
    assert got["colours"] == [
        ["bold red", 1, None, True],
        [" ", None, None, False],
        ["bright", 10, None, False],
        [" plain", None, None, False],
    ]
    assert got["extended"] == [
        ["a", "rgb(255, 0, 0)", None, False],
        ["b", "rgb(1, 2, 3)", None, False],
        ["c", "rgb(1, 2, 3)", "rgb(128, 128, 128)", False],
    ]
    assert got["backspace"] == [["ac", None, None, False]]
    assert got["unterminated"] == [["ok", None, None, False]]
    assert carried == 2
