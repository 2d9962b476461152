"""A preview's life on the real stack: coming up or failing typed, held requests while it
starts, crashes and restarts, idling, stopping, following a branch, and the runner agent
or the engine restarting under it."""

import http.client
import json
import time
from urllib.parse import urlsplit

import pytest

from tests.support.previews import ENDED, PROBE_APP, Browser, opened, probe_toml, write

pytestmark = pytest.mark.docker


@pytest.mark.parametrize(
    "command, reason",
    [
        ("python3 probe_app.py exit", "process_exited"),
        ("python3 probe_app.py silent", "not_listening"),
    ],
)
def test_a_preview_that_never_comes_up_fails_with_a_reason(
    agent, probe, cast, berth_server, command, reason
):
    write(probe, cast.carol, {"workspace.toml": probe_toml(command)})
    preview = agent.wait(agent.start(), ENDED)
    assert (preview["state"], preview["reason"]) == ("failed", reason), preview
    assert preview["message"]
    browser = opened(berth_server, agent, preview)
    page = browser.get(preview["url"])
    assert page.status_code == 503
    if reason == "process_exited":
        assert preview["exit_code"] == 3
        assert "giving up at once" in page.text  # the last log lines, on the typed page
    r = browser.get(preview["url"], headers={"Accept": "application/json"})
    assert r.json()["error"]["code"] == "preview_failed"


def test_a_request_to_a_starting_preview_waits_for_the_app(agent, probe, cast, berth_server):
    write(probe, cast.carol, {"workspace.toml": probe_toml("python3 probe_app.py slow")})
    preview = agent.start()
    browser = opened(berth_server, agent, preview)
    # Asked for while the app still sleeps: the gateway hands the request to daphne,
    # which holds it until the app is ready, then gets the app's own answer. The app
    # is told the real client (127.0.0.2 here), not the gateway (127.0.0.1).
    assert (
        _headers_from("127.0.0.2", berth_server, browser, preview)["x-forwarded-for"] == "127.0.0.2"
    )
    assert agent.get(preview)["state"] == "ready"
    page = browser.get(preview["url"])  # and now on the gateway's own fast path
    assert page.status_code == 200 and "probe app" in page.text
    assert (
        _headers_from("127.0.0.2", berth_server, browser, preview)["x-forwarded-for"] == "127.0.0.2"
    )


def _headers_from(address: str, berth_server, browser: Browser, preview: dict) -> dict:
    """What the app saw of a request sent from `address` (any 127.x is this machine)."""
    conn = http.client.HTTPConnection(
        "127.0.0.1", berth_server.gateway_port, timeout=60, source_address=(address, 0)
    )
    conn.request(
        "GET",
        "/headers",
        headers={
            "Host": urlsplit(preview["url"]).netloc,
            "Cookie": "; ".join(f"{k}={v}" for k, v in browser.cookies.items()),
        },
    )
    response = conn.getresponse()
    body = response.read()
    conn.close()
    assert response.status == 200, body
    return json.loads(body)


def test_a_preview_that_stays_starting_answers_starting_after_the_hold(
    agent, probe, cast, berth_server
):
    write(probe, cast.carol, {"workspace.toml": probe_toml("python3 probe_app.py silent")})
    preview = agent.start()
    browser = opened(berth_server, agent, preview)
    asked = time.monotonic()
    r = browser.get(preview["url"], headers={"Accept": "application/json"})
    assert r.status_code == 503 and r.json()["error"]["code"] == "preview_starting", r.text
    assert time.monotonic() - asked >= 3.5  # held for PREVIEW_HOLD_S (4 s) first
    assert agent.get(preview)["state"] == "starting"  # the hold (4 s) < the deadline (6 s)


def test_health_returning_500_fails_with_the_status(agent, probe, cast):
    write(probe, cast.carol, {"workspace.toml": probe_toml(health_path="/health500")})
    preview = agent.wait(agent.start(), ENDED)
    assert (preview["state"], preview["reason"]) == ("failed", "health_failed"), preview
    assert preview["health"]["last_status"] == 500 and "500" in preview["message"]


def test_a_killed_process_is_a_crash_and_a_restart_brings_it_back(agent, ready, berth_server):
    from runs.models import Run
    from sandbox.engine import engine

    run = Run.objects.get(public_id=ready["run"])
    engine().containers.get(run.container_name).kill("SIGKILL")
    crashed = agent.wait(ready, ENDED)
    assert crashed["state"] == "crashed" and crashed["reason"] == "process_exited"
    browser = opened(berth_server, agent, crashed)
    assert "crashed" in browser.get(crashed["url"]).text
    r = agent.post(crashed, "restart")
    assert r.status_code == 202 and r.json()["state"] == "starting"
    again = agent.wait(crashed, {"ready"} | ENDED)
    assert again["state"] == "ready" and again["restarts"] == 1 and again["run"] != ready["run"]
    assert browser.get(again["url"]).status_code == 200


def test_an_idle_preview_stops_and_says_so(agent, berth_server):
    preview = agent.wait(agent.start(idle_timeout_s=2), {"ready"} | ENDED)
    assert preview["state"] == "ready"
    stopped = agent.wait(preview, ENDED, timeout=30)
    assert (stopped["state"], stopped["reason"]) == ("stopped", "idle")
    browser = opened(berth_server, agent, stopped)
    page = browser.get(stopped["url"])
    assert page.status_code == 503 and "stopped (idle)" in page.text and "Restart" in page.text


def test_stop_by_the_user_ends_the_sandbox(agent, ready):
    from runs.models import Run

    r = agent.post(ready, "stop")
    assert r.status_code == 202 and r.json()["reason"] == "stopped_by_user"
    run = Run.objects.get(public_id=ready["run"])
    from tests.support.servers import wait_for

    wait_for(
        lambda: not Run.objects.get(pk=run.pk).is_active,
        timeout=30,
        what="the preview's run to end",
    )
    assert agent.post(ready, "stop").status_code == 409


def test_a_following_preview_restarts_on_a_new_commit(agent, probe, cast, berth_server):
    preview = agent.wait(agent.start(follow=True), {"ready"} | ENDED)
    assert preview["state"] == "ready" and preview["follow"]
    sha = write(probe, cast.carol, {"probe_app.py": PROBE_APP.replace("probe app", "probe v2")})
    moved = agent.wait(preview, {"starting", "ready"})
    assert moved["commit"] == sha
    again = agent.wait(preview, {"ready"} | ENDED)
    assert again["state"] == "ready" and again["restarts"] == 1
    browser = opened(berth_server, agent, again)
    assert "probe v2" in browser.get(again["url"]).text
    agent.post(again, "stop")
    r = agent.client.post(
        "/api/v1/workspaces/probe/previews",
        {"ref": sha[:12], "follow": True},
        content_type="application/json",
        **agent.headers,
    )
    assert r.status_code == 422 and "branch" in r.json()["error"]["message"]


def test_a_following_preview_stops_typed_when_its_branch_asks_for_a_wider_contract(
    agent, probe, cast
):
    """The new commit's contract waits for a reviewer: the preview does not keep serving a
    commit it no longer follows, and says why (workspaces.reviews)."""
    preview = agent.wait(agent.start(follow=True), {"ready"} | ENDED)
    assert preview["state"] == "ready"
    write(probe, cast.carol, {"workspace.toml": probe_toml().replace("256", "2048")})
    ended = agent.wait(preview, ENDED)
    assert (ended["state"], ended["reason"]) == ("stopped", "contract_change_pending")
    assert "memory_mb raised from 1024 to 2048" in ended["message"]  # the defaults
    assert "/contract-reviews/" in ended["message"]


def test_a_ready_preview_survives_a_restart_of_the_runner_agent(
    agent, ready, run_stack, berth_server
):
    run_stack.agent.kill()
    run_stack.agent.start()
    browser = opened(berth_server, agent, ready)
    assert browser.get(ready["url"]).status_code == 200
    assert agent.get(ready)["state"] == "ready"
    # ...and the new agent still carries it: a stop ends its sandbox.
    assert agent.post(ready, "stop").status_code == 202
    from runs.models import Run
    from tests.support.servers import wait_for

    wait_for(
        lambda: not Run.objects.get(public_id=ready["run"]).is_active,
        timeout=30,
        what="the preview's run to end",
    )


@pytest.mark.alone  # restarts the shared dockerd
def test_an_engine_restart_under_a_ready_preview_ends_it_typed_and_restartable(
    agent, ready, berth_server
):
    """The engine's restart stops every container (no live-restore): the preview ends
    in a typed state that says so, never `ready` with nothing behind it, and a restart
    brings it back."""
    from tests.support.servers import restart_engine

    restart_engine()
    ended = agent.wait(ready, ENDED, timeout=90)
    assert ended["state"] == "crashed", ended
    assert ended["reason"] and ended["message"], ended
    r = agent.post(ended, "restart")
    assert r.status_code == 202, r.content
    again = agent.wait(ended, {"ready"} | ENDED, timeout=90)
    assert again["state"] == "ready" and again["run"] != ready["run"], again
    assert opened(berth_server, agent, again).get(again["url"]).status_code == 200
