"""An agent asks, a human approves, in a real Chromium (issue 11, scenario 2): carol makes
an agent token on the Tokens page; the agent runs the tests and asks for a deploy
through the API; bob sees the badge, reviews the diff and the passing run, approves;
the release's address shows the app; carol sees what the agent and bob did."""

import json
import re
import urllib.request
from pathlib import Path

import pytest

from accounts.access import Actor
from tests.support.browser import chromium_page
from tests.support.servers import wait_for
from workspaces.actions import create_workspace

pytestmark = [pytest.mark.browser, pytest.mark.docker]

OUTPUT = Path(__file__).resolve().parents[2] / "var" / "test-output"


def api(server, secret: str, method: str, path: str, body: dict | None = None) -> dict:
    request = urllib.request.Request(
        f"{server.url}/api/v1{path}",
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as r:
        return json.loads(r.read())


# Where each label's box and its words are drawn.
BOXES_AND_WORDS = """(selector) => [...document.querySelectorAll(selector)].map((label) => {
    const where = (r) => ({
        left: r.left, right: r.right, width: r.width, middle: r.top + r.height / 2,
    });
    const text = [...label.childNodes].find((n) => n.nodeType === 3 && n.textContent.trim());
    const words = document.createRange();
    words.selectNodeContents(text);
    return {
        label: label.textContent.trim(),
        input: where(label.querySelector("input").getBoundingClientRect()),
        words: where(words.getBoundingClientRect()),
    };
})"""


def sign_in(page, server, who: str, next_path: str) -> None:
    page.goto(f"{server.url}/signin/?next={next_path}")
    page.fill("input[name=username]", who)
    page.fill("input[name=password]", f"{who}-password-1")
    page.click("button[type=submit]")
    page.wait_for_url(f"**{next_path}")


def test_an_agent_asks_for_a_deploy_and_bob_approves_it_in_the_browser(
    berth_server, run_stack, cast
):
    create_workspace(cast.team_a, Actor(cast.carol), "Shop", "shop", "python-http")
    with chromium_page() as page:
        sign_in(page, berth_server, "carol", "/t/team-a/tokens/")
        page.fill("input[name=name]", "shipping agent")
        for scope in ("workspace:read", "run", "deploy:request"):
            page.check(f"input[value='{scope}']")
        # Each box sits on its label's line, before its words (not above them, full width).
        for box in page.evaluate(BOXES_AND_WORDS, "#id_scopes label"):
            assert box["input"]["width"] < 30, box
            assert box["input"]["right"] <= box["words"]["left"], box
            assert abs(box["input"]["middle"] - box["words"]["middle"]) < 4, box
        page.click("text=Create token")
        secret = page.input_value("#token-value")

    # The agent's part, through the API: the tests pass, then it asks.
    run = api(
        berth_server, secret, "POST", "/workspaces/shop/runs", {"command": "python3 -m unittest"}
    )
    run = wait_for(
        lambda: api(berth_server, secret, "GET", f"/runs/{run['id']}"),
        120,
        interval=0.2,
        what="the tests' run to end",
        until=lambda run: run["state"] not in ("queued", "preparing", "running"),
    )
    assert run["state"] == "succeeded", run
    # Another run on the commit, cancelled: it says nothing about the commit either way.
    stopped = api(berth_server, secret, "POST", "/workspaces/shop/runs", {"command": "sleep 60"})
    api(berth_server, secret, "POST", f"/runs/{stopped['id']}/cancel")
    wait_for(
        lambda: api(berth_server, secret, "GET", f"/runs/{stopped['id']}")["state"],
        60,
        interval=0.2,
        what="the second run to be cancelled",
        until=lambda state: state == "cancelled",
    )
    asked = api(
        berth_server, secret, "POST", "/workspaces/shop/deploys", {"note": "the greeting is ready"}
    )
    assert asked["state"] == "requested"

    with chromium_page() as page:
        sign_in(page, berth_server, "bob", "/t/team-a/")
        badge = page.locator("a:has-text('Deploys to review') .pending-deploys")
        assert badge.inner_text() == "1"
        page.click("text=Deploys to review")
        page.click(f"a:has-text('{asked['id']}')")
        assert page.inner_text("#deploy-state") == "requested"
        assert "the greeting is ready" in page.inner_text("#deploy-head")
        assert "token shipping agent" in page.inner_text("#deploy-head")
        runs = page.inner_text("#review-runs")
        assert "python3 -m unittest" in runs and "succeeded" in runs
        # The cancelled run is not among failures: said quietly, with its link.
        assert page.locator("#failed-runs").count() == 0
        cancelled = page.locator("#cancelled-runs")
        assert "1 run on this commit was cancelled" in cancelled.inner_text()
        assert cancelled.get_attribute("class") == "muted" and cancelled.locator("a").count() == 1
        assert page.locator("#review-runs .badge.state-cancelled").count() == 1
        assert page.locator("#review-diff h2").inner_text() == "What would ship"
        assert "app.py" in page.inner_text("#review-diff")
        page.click("#approve")
        assert "Approved: the release is being built" in page.inner_text(".messages")

        # The reviewer waits on the page, never reloading it: it says each state the
        # deploy moves through (its socket), up to live.
        page.evaluate(
            """() => {
                window.notReloaded = true;
                window.statesSeen = [document.querySelector('#deploy-state').textContent];
                new MutationObserver(() => {
                    const now = document.querySelector('#deploy-state')?.textContent;
                    if (now && now !== window.statesSeen.at(-1)) window.statesSeen.push(now);
                }).observe(document.body, {subtree: true, childList: true, characterData: true});
            }"""
        )
        live = page.locator("#deploy-state", has_text="live")
        failed = page.locator("#deploy-state", has_text="failed")
        live.or_(failed).wait_for(timeout=180_000)
        assert page.inner_text("#deploy-state") == "live", page.inner_text("#deploy-head")
        assert page.evaluate("window.notReloaded") is True
        seen = page.evaluate("window.statesSeen")
        assert seen[-1] == "live" and set(seen) <= {"approved", "building", "releasing", "live"}
        assert "building" in seen, seen
        assert "apps.localhost" in page.inner_text("#deploy-live")
        # Live, still never reloaded: the page says what shipped, against what was live
        # before it (nothing).
        page.locator("#review-diff h2", has_text="What shipped").wait_for()
        assert page.evaluate("window.notReloaded") is True
        diff = page.inner_text("#review-diff")
        assert page.locator("#review-diff h2").inner_text() == "What shipped"
        assert "Release 1 went live with this commit" in diff
        assert "Nothing was live before it: every file was new" in diff
        changed = re.search(r"(\d+) files? changed", diff)
        assert changed and int(changed.group(1)) > 0 and "app.py" in diff
        page.goto(f"http://shop--team-a.apps.localhost:{berth_server.gateway_port}/")
        assert page.inner_text("h1") == "Hello, world!"

    with chromium_page() as page:
        sign_in(page, berth_server, "carol", "/t/team-a/activity/")
        table = page.inner_text("table")
        # In words, each code kept on its cell.
        assert "shipping agent (token of carol)" in table and "asked for a deploy" in table
        rows = [r for r in table.splitlines() if "approved a deploy" in r]
        assert rows and rows[0].split("\t")[1] == "bob"
        approved = page.locator("td.verb[data-verb='deploy.approved']").first
        assert approved.get_attribute("title") == "deploy.approved"
        assert "deploy.approved" not in table and page.locator("table code").count() == 0
        OUTPUT.mkdir(parents=True, exist_ok=True)
        page.goto(f"{berth_server.url}/t/team-a/w/shop/deploys/")
        assert "Release 1" in page.inner_text("#live-release")
        page.screenshot(path=str(OUTPUT / "deploys.png"), full_page=True)
