"""Previews through the API and the proxy: real daphne, Celery worker, runner agent and
Docker engine."""

import hashlib
import os

import pytest

from accounts.access import Actor
from tests.previews import PROBE_APP, Browser, PreviewAgent, probe_toml, write
from workspaces import actions as workspace_actions

pytestmark = pytest.mark.docker

ENDED = {"failed", "stopped", "crashed"}


@pytest.fixture
def probe(cast):
    workspace = workspace_actions.create_workspace(cast.team_a, Actor(cast.carol), "Probe",
                                                   "probe")
    write(workspace, cast.carol, {"probe_app.py": PROBE_APP, "workspace.toml": probe_toml()})
    return workspace


@pytest.fixture
def agent(client, cast, probe, run_stack, berth_server) -> PreviewAgent:
    _, secret = cast.token(cast.carol, ["workspace:read", "workspace:write", "preview"])
    return PreviewAgent(client, secret, "probe")


@pytest.fixture
def ready(agent) -> dict:
    preview = agent.wait(agent.start(), {"ready"} | ENDED)
    assert preview["state"] == "ready", preview
    yield preview
    agent.post(preview, "stop")


def opened(berth_server, agent, preview) -> Browser:
    browser = Browser(berth_server)
    browser.open(agent.link(preview))
    return browser


def test_a_preview_comes_up_and_the_proxy_serves_its_pages(agent, ready, berth_server):
    assert ready["url"] == f"http://{ready['id']}.preview.localhost:{berth_server.port}/" or \
        ready["url"].startswith(f"http://{ready['id']}.preview.localhost")
    assert ready["timings"]["ready_at"] and ready["time_until_usable_s"] > 0
    assert ready["health"]["last_status"] == 200
    browser = opened(berth_server, agent, ready)
    page = browser.get(ready["url"])
    assert page.status_code == 200 and "probe app" in page.text
    # the process log streams like a run's
    log = agent.client.get(f"/api/v1/previews/{ready['id']}/logs", **agent.headers).json()
    assert any("probe app listening" in e["text"] for e in log["entries"])


def test_bodies_round_trip_and_large_answers_stream(agent, ready, berth_server):
    browser = opened(berth_server, agent, ready)
    body = os.urandom(5 * 1024 * 1024)
    r = browser.request("POST", ready["url"] + "echo", data=body)
    assert r.status_code == 200 and r.headers["X-Length"] == str(len(body))
    assert r.text == hashlib.sha256(body).hexdigest()

    before = _reset_peak_rss(berth_server.pid)
    r = browser.request("GET", ready["url"] + "big?mb=50", stream=True)
    total = sum(len(c) for c in r.iter_content(1 << 16))
    assert total == 50 << 20
    # Streamed, not buffered: daphne's peak memory grew far less than the answer.
    grew = _peak_rss(berth_server.pid) - before
    assert grew < 20 << 20, f"daphne's peak RSS grew {grew >> 20} MB for a 50 MB answer"


def _peak_rss(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def _reset_peak_rss(pid: int) -> int:
    """Reset the process's peak RSS to its current RSS (Linux: clear_refs 5)."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")
    return _peak_rss(pid)
