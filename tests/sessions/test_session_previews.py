"""Previews of a session: an app an agent started in its session, served through the
preview gateway from the session's container; a request is the session's activity, a
frozen session resumes for one, health checks leave a frozen one alone, and the
session's stop ends the preview, typed."""

import base64
import threading
import time

import pytest
from django.db import connection

from previews.models import Preview
from sessions.models import Session
from tests.support.mcp import Agent, connect
from tests.support.previews import Browser
from tests.support.servers import wait_for
from tests.support.sessions import SERVE, SessionAgent, container_of

pytestmark = pytest.mark.docker

PERSISTENCE = {
    "commits",
    "uncommitted_files",
    "dependency_cache",
    "home_and_tmp",
    "processes_and_memory",
}


@pytest.fixture
def agent(client, cast, shop, run_stack, berth_server) -> SessionAgent:
    _, secret = cast.token(cast.carol, ["workspace:read", "workspace:write", "run", "preview"])
    return SessionAgent(client, secret)


def preview_of(agent: SessionAgent, session: dict, status: int = 202, **body) -> dict:
    r = agent.post(f"/sessions/{session['id']}/preview", {"port": 8080, **body})
    assert r.status_code == status, r.content
    return r.json()


def settled(agent: SessionAgent, preview: dict, *states: str) -> dict:
    return wait_for(
        lambda: agent.get(f"/previews/{preview['id']}").json(),
        90,
        interval=0.1,
        what=f"preview {preview['id']} to be {states}",
        until=lambda p: p["state"] in states,
    )


def viewer(berth_server, agent: SessionAgent, preview: dict) -> Browser:
    r = agent.post(f"/previews/{preview['id']}/link")
    assert r.status_code == 200, r.content
    browser = Browser(berth_server)
    browser.open(r.json()["url"])
    return browser


def paused(session: dict) -> bool:
    container = container_of(session["run"])
    container.reload()
    return bool(container.attrs["State"]["Paused"])


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
def test_a_session_serves_its_app_and_a_request_resumes_it_from_frozen(
    agent, berth_server, runtime
):
    session = agent.ready(runtime=runtime, idle_freeze_s=3, idle_stop_s=300)
    assert agent.exec(session, SERVE)["exit_code"] == 0
    preview = preview_of(agent, session)
    assert preview["session"] == session["id"]
    assert set(preview["persistence"]) == PERSISTENCE
    assert preview["persistence"]["processes_and_memory"]["kept_now"] is True
    ready = settled(agent, preview, "ready", "failed", "stopped")
    assert ready["state"] == "ready", ready
    # Asked again for the same port: the same preview, not a second one.
    assert preview_of(agent, session)["id"] == preview["id"]

    browser = viewer(berth_server, agent, preview)
    page = browser.get(preview["url"] + "hi.txt")
    assert page.status_code == 200 and page.text == "hello from the session\n"

    # Requests are the session's activity: past its idle_freeze_s it stays ready, and
    # every request is answered (a freeze begun between two is called off).
    until = time.monotonic() + 7
    while time.monotonic() < until:
        assert browser.get(preview["url"] + "hi.txt").status_code == 200
        time.sleep(0.5)
    assert agent.session(session)["state"] in ("ready", "freezing")

    frozen = agent.wait_state(session, "frozen")
    assert paused(frozen)
    # Health checks leave a frozen session alone (a probe would hang on it).
    checked = Preview.objects.get(public_id=preview["id"]).last_health_at
    time.sleep(6)
    assert Preview.objects.get(public_id=preview["id"]).last_health_at == checked
    assert agent.get(f"/previews/{preview['id']}").json()["state"] == "ready"

    # A request resumes it, transparently, and is served: its processes were kept.
    started = time.monotonic()
    page = browser.get(preview["url"] + "hi.txt")
    assert page.status_code == 200 and page.text == "hello from the session\n"
    assert time.monotonic() - started < 15
    back = agent.session(session)
    assert back["state"] == "ready" and not paused(back)


def test_stopping_the_session_ends_its_preview_typed(agent, berth_server):
    session = agent.ready()
    # A detached exec keeps its process (and the session: it is activity while it runs).
    agent.exec(
        session,
        "cd /workspace && python3 -m http.server 8080 --bind 127.0.0.1",
        detach=True,
        status=202,
    )
    preview = settled(agent, preview_of(agent, session), "ready", "failed")
    assert preview["state"] == "ready", preview
    browser = viewer(berth_server, agent, preview)
    assert browser.get(preview["url"]).status_code == 200

    r = agent.post(f"/sessions/{session['id']}/stop")
    assert r.status_code == 202, r.content
    stopped = settled(agent, preview, "stopped", "failed", "crashed")
    assert (stopped["state"], stopped["reason"]) == ("stopped", "session_ended"), stopped
    assert f"Session {session['id']} stopped (closed)" in stopped["message"]
    assert "start the session again" in stopped["message"].lower()
    assert stopped["persistence"]["processes_and_memory"]["kept_now"] is False
    assert stopped["persistence"]["uncommitted_files"]["kept_now"] is True

    # The gateway looks a preview up again at least every 2 s.
    page = wait_for(
        lambda: browser.get(preview["url"], headers={"Accept": "application/json"}),
        10,
        interval=0.2,
        what="the gateway to answer for the stopped preview",
        until=lambda r: r.status_code == 503,
    )
    assert page.json()["error"]["code"] == "preview_stopped"
    # A stopped session has nothing to preview; nor does a deleted one.
    assert preview_of(agent, session, 409)["error"]["code"] == "session_stopped"
    deleted = agent.client.delete(f"/api/v1/sessions/{session['id']}", **agent.headers)
    assert deleted.status_code in (200, 202), deleted.content
    agent.wait_state(session, "deleted", timeout=60)
    assert preview_of(agent, session, 409)["error"]["code"] == "session_deleted"
    # A preview of a session is restarted by previewing the session again.
    r = agent.post(f"/previews/{preview['id']}/restart")
    assert r.status_code == 409 and r.json()["error"]["code"] == "session_preview"


def test_bad_asks_are_refused_typed(agent, client, cast):
    starting = agent.open()
    assert preview_of(agent, starting, 409)["error"]["code"] == "session_not_ready"
    session = agent.wait_state(starting, "ready", timeout=120)
    for port in (0, 70000):
        preview_of(agent, session, 422, port=port)
    for port in (61001, 3128):  # the exec channel's, the egress proxy's: Berth's own
        assert preview_of(agent, session, 422, port=port)["error"]["code"] == "port_reserved"
    assert preview_of(agent, session, 422, health_path="no-slash")["error"]["code"]

    # Another team's token does not learn the session exists.
    _, other = cast.token(cast.charlie, ["workspace:read", "run", "preview"])
    stranger = SessionAgent(client, other)
    r = stranger.post(f"/sessions/{session['id']}/preview", {"port": 8080})
    assert r.status_code == 404, r.content
    # A token without the preview scope is told which one it lacks.
    _, runner = cast.token(cast.carol, ["workspace:read", "run"])
    r = SessionAgent(client, runner).post(f"/sessions/{session['id']}/preview", {"port": 8080})
    assert r.status_code == 403, r.content
    assert not Preview.objects.filter(session=Session.objects.get(public_id=session["id"]))


def test_an_agent_previews_its_session_through_mcp(berth_server, run_stack, cast, shop):
    _, secret = cast.token(cast.carol, ["workspace:read", "workspace:write", "run", "preview"])

    async def body(agent: Agent) -> None:
        session = await agent("open_session", workspace="shop")
        assert session["state"] == "ready", session
        await agent("exec", session=session["id"], command=SERVE)
        preview = await agent("preview_session", session=session["id"], port=8080)
        assert preview["state"] == "ready" and preview["session"] == session["id"]
        assert preview["link"] and preview["persistence"]["commits"]["kept_now"] is True
        page = await agent("fetch_preview", preview_id=preview["id"], path="/hi.txt")
        assert page["status"] == 200 and page["body"] == "hello from the session\n"
        refused = await agent.error("preview_session", session=session["id"], port=61001)
        assert refused["code"] == "port_reserved"

    connect(berth_server, secret, body)


SLOW_APP = b"""import http.server, time
class App(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/slow":
            time.sleep(6)
        self.send_response(200)
        self.send_header("Content-Length", "4")
        self.end_headers()
        self.wfile.write(b"done")
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", 8080), App).serve_forever()
"""


def test_a_request_in_flight_when_the_session_would_freeze_is_answered(agent, berth_server):
    session = agent.ready(idle_freeze_s=2, idle_stop_s=300)
    encoded = base64.b64encode(SLOW_APP).decode()
    start = SERVE.replace("python3 -m http.server 8080 --bind 127.0.0.1", "python3 /tmp/slow.py")
    assert (
        agent.exec(session, f"echo {encoded} | base64 -d > /tmp/slow.py && {start}")["exit_code"]
        == 0
    ), "the slow app started"
    preview = settled(agent, preview_of(agent, session), "ready", "failed")
    assert preview["state"] == "ready", preview
    browser = viewer(berth_server, agent, preview)

    seen: set[str] = set()
    done = threading.Event()

    def watch() -> None:
        try:
            while not done.is_set():
                seen.add(Session.objects.get(public_id=session["id"]).state)
                time.sleep(0.05)
        finally:
            connection.close()

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        # Idle past idle_freeze_s while it is answered: the keeper asks to freeze, the
        # gateway still has the request open, so the freeze is called off, never paused.
        started = time.monotonic()
        page = browser.get(preview["url"] + "slow")
    finally:
        done.set()
        watcher.join()
    assert page.status_code == 200 and page.text == "done"
    assert time.monotonic() - started < 15
    assert "frozen" not in seen, seen
    # Nobody asking afterwards: it freezes.
    assert paused(agent.wait_state(session, "frozen", timeout=60))
