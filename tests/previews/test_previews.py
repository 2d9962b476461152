"""Previews through the API and the proxy: real daphne, Celery worker, runner agent and
Docker engine."""

import hashlib
import json
import os
import socket
from urllib.parse import urlsplit

import pytest
from django.conf import settings

from accounts.access import Actor
from tests.support.previews import (
    ENDED,
    Browser,
    PreviewAgent,
    both_runtimes,
    opened,
    probe_toml,
    write,
)
from workspaces import actions as workspace_actions

pytestmark = pytest.mark.docker


@both_runtimes
def test_a_preview_comes_up_and_the_proxy_serves_its_pages(agent, ready, berth_server, runtime):
    # On the preview gateway's port, whatever port the asking request came in on.
    assert ready["url"] == f"http://{ready['id']}.preview.localhost:{settings.PREVIEW_PORT}/"
    assert ready["timings"]["ready_at"] and ready["time_until_usable_s"] > 0
    assert ready["health"]["last_status"] == 200
    assert ready["runtime"] == runtime and ready["isolation"]["network"] == "none"
    assert ready["isolation"]["runtime"] == {"runc": "runc", "gvisor": "runsc"}[runtime]
    browser = opened(berth_server, agent, ready)
    page = browser.get(ready["url"])
    assert page.status_code == 200 and "probe app" in page.text
    # the process log streams like a run's
    log = agent.client.get(f"/api/v1/previews/{ready['id']}/logs", **agent.headers).json()
    assert any("probe app listening" in e["text"] for e in log["entries"])


@both_runtimes
def test_bodies_round_trip_and_large_answers_stream(agent, ready, berth_server, runtime):
    browser = opened(berth_server, agent, ready)
    body = os.urandom(5 * 1024 * 1024)
    r = browser.request("POST", ready["url"] + "echo", data=body)
    assert r.status_code == 200 and r.headers["X-Length"] == str(len(body))
    assert r.text == hashlib.sha256(body).hexdigest()

    before = _reset_peak_rss(berth_server.gateway_pid)
    r = browser.request("GET", ready["url"] + "big?mb=50", stream=True)
    total = sum(len(c) for c in r.iter_content(1 << 16))
    assert total == 50 << 20
    # Streamed, not buffered: the gateway's peak memory grew far less than the answer.
    grew = _peak_rss(berth_server.gateway_pid) - before
    assert grew < 20 << 20, f"the gateway's peak RSS grew {grew >> 20} MB for a 50 MB answer"


def _peak_rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def _reset_peak_rss(pid: int) -> int:
    """Reset the process's peak RSS to its current RSS (Linux: clear_refs 5)."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")
    return _peak_rss(pid)


@both_runtimes
def test_a_websocket_echo_goes_through_the_proxy(agent, ready, berth_server, runtime):
    import asyncio

    from websockets.asyncio.client import connect

    browser = opened(berth_server, agent, ready)
    cookie = "; ".join(f"{k}={v}" for k, v in browser.cookies.items())

    async def talk() -> list[str | bytes]:
        # The preview's name does not resolve outside a browser here: connect to the
        # gateway, and let the URI give the Host header.
        sock = socket.create_connection(("127.0.0.1", berth_server.gateway_port))
        async with connect(
            f"ws://{ready['id']}.preview.localhost:{settings.PREVIEW_PORT}/ws",
            sock=sock,
            proxy=None,
            additional_headers={"Cookie": cookie},
        ) as ws:
            got = []
            for word in ("hello", "hot reload"):
                await ws.send(word)
                got.append(await asyncio.wait_for(ws.recv(), 10))
            return got

    assert asyncio.run(talk()) == ["echo:hello", "echo:hot reload"]


def test_berth_credentials_never_reach_the_app_and_forwarding_headers_are_set(
    agent, ready, berth_server
):
    browser = opened(berth_server, agent, ready)
    r = browser.get(
        ready["url"] + "headers",
        headers={
            "Authorization": "Bearer berth_secret",
            "X-Forwarded-For": "6.6.6.6",
            "X-Berth-Client": "6.6.6.6",
            "X-Berth-Gateway": "forged",
            "Cookie": "; ".join(f"{k}={v}" for k, v in browser.cookies.items())
            + "; sessionid=app-session; csrftoken=tok; mine=kept",
        },
    )
    assert r.status_code == 200, r.text
    seen = r.json()
    assert "authorization" not in seen and "x-berth-client" not in seen
    assert "x-berth-gateway" not in seen
    assert seen["cookie"] == "mine=kept"
    assert seen["x-forwarded-for"] == "127.0.0.1"
    assert seen["x-forwarded-host"] == urlsplit(ready["url"]).netloc
    assert seen["x-forwarded-proto"] == "http"


def test_upstream_cookies_for_other_domains_are_dropped_and_redirects_returned(
    agent, ready, berth_server
):
    browser = opened(berth_server, agent, ready)
    r = browser.get(ready["url"] + "cookies")
    cookies = r.raw.headers.getlist("Set-Cookie")
    assert cookies == ["own=2; Path=/"], cookies
    r = browser.get(ready["url"] + "redirect")
    assert r.status_code == 302 and r.headers["Location"] == "http://169.254.169.254/latest/"


def test_a_preview_is_private_to_its_team(agent, ready, berth_server, cast, signed_in):
    url = ready["url"]
    anonymous = Browser(berth_server)
    r = anonymous.get(url, headers={"Accept": "text/html"})
    assert r.status_code == 302 and f"/previews/{ready['id']}/open" in r.headers["Location"]
    r = anonymous.get(url, headers={"Accept": "application/json"})
    assert r.status_code == 401 and r.json()["error"]["code"] == "preview_sign_in_required"

    # A ticket works once, and only on its own preview's host.
    link = agent.link(ready)
    other = agent.wait(agent.start(), {"ready"} | ENDED)
    elsewhere = Browser(berth_server)
    wrong_host = link.replace(ready["id"], other["id"])
    assert elsewhere.get(wrong_host).status_code == 403
    first = Browser(berth_server)
    assert first.open(link).headers["Location"] == "/"
    assert first.get(url).status_code == 200
    assert Browser(berth_server).get(link).status_code == 403  # used
    # Its cookie is for that preview only.
    assert first.get(other["url"], headers={"Accept": "application/json"}).status_code == 401
    agent.post(other, "stop")

    # charlie (team B) cannot open it from the app: 404, no ticket.
    r = signed_in(cast.charlie).get(f"/previews/{ready['id']}/open")
    assert r.status_code == 404
    # carol can, and the redirect carries a ticket for the preview host.
    r = signed_in(cast.carol).get(f"/previews/{ready['id']}/open")
    assert r.status_code == 302 and r["Location"].startswith(url.rstrip("/") + "/__berth/ticket")

    # An unknown preview id is a 404 on the preview domain.
    r = anonymous.get(
        f"http://zzzzzzzzzzzz.preview.localhost:{berth_server.port}/",
        headers={"Accept": "application/json"},
    )
    assert r.status_code == 404


def test_only_the_declared_port_is_reachable(agent, probe, cast, berth_server):
    write(probe, cast.carol, {"workspace.toml": probe_toml("python3 probe_app.py second-port")})
    preview = agent.wait(agent.start(), {"ready"} | ENDED)
    assert preview["state"] == "ready"
    browser = opened(berth_server, agent, preview)
    # Every URL of the preview goes to port 8000; a port in the Host header is Berth's.
    for host in (
        f"{preview['id']}.preview.localhost:9999",
        f"{preview['id']}.preview.localhost:{berth_server.port}",
    ):
        r = browser.get(f"http://{host}/headers")
        assert r.status_code == 200
        assert r.json()["host"] == host  # answered by the app on 8000 (same handler)
    assert "9999" not in str(agent.get(preview)["port"])
    agent.post(preview, "stop")


@pytest.mark.parametrize(
    "template, text", [("python-http", "Hello, world!"), ("node-http", "Hello, world!")]
)
def test_the_templates_preview_through_the_proxy(
    client, cast, run_stack, berth_server, template, text
):
    workspace = workspace_actions.create_workspace(
        cast.team_a, Actor(cast.carol), template, template, template
    )
    _, secret = cast.token(cast.carol, ["preview"])
    agent = PreviewAgent(client, secret, template)
    preview = agent.wait(agent.start(), {"ready"} | ENDED, timeout=180)
    assert preview["state"] == "ready", preview
    assert preview["setup"] is not None  # both templates install dependencies first
    browser = opened(berth_server, agent, preview)
    page = browser.get(preview["url"])
    assert page.status_code == 200 and text in page.text
    assert browser.get(preview["url"] + "api/hello").json() == {"message": text}
    agent.post(preview, "stop")
    assert workspace.previews.count() == 1


def test_an_admin_makes_a_preview_public_and_cookies_are_still_stripped(
    agent, ready, berth_server, cast, client
):
    r = agent.post(ready, "public", {"public": True})
    assert r.status_code == 403 and r.json()["error"]["code"] == "admin_required"
    _, secret = cast.token(cast.alice, ["workspace:write", "preview"])
    admin = PreviewAgent(client, secret, "probe")
    r = admin.post(ready, "public", {"public": True})
    assert r.status_code == 200 and r.json()["public"] is True
    from accounts.models import Activity

    assert Activity.objects.filter(verb="preview.made_public").exists()
    stranger = Browser(berth_server)
    seen = stranger.get(
        ready["url"] + "headers", headers={"Cookie": "sessionid=s; berth_preview=x; a=b"}
    ).json()
    assert seen["cookie"] == "a=b"


def test_bad_requests_get_clear_errors(agent, probe, cast, client):
    r = agent.client.post(
        "/api/v1/workspaces/probe/previews",
        {"ref": "nope"},
        content_type="application/json",
        **agent.headers,
    )
    assert r.status_code == 404
    write(probe, cast.carol, {"workspace.toml": "[sandbox]\nmemory_mb = 256\n"})
    r = agent.client.post(
        "/api/v1/workspaces/probe/previews", {}, content_type="application/json", **agent.headers
    )
    assert r.status_code == 422 and r.json()["error"]["code"] == "no_preview_command"
    r = agent.client.post(
        "/api/v1/workspaces/probe/previews",
        {"privileged": True},
        content_type="application/json",
        **agent.headers,
    )
    assert r.status_code == 422
    _, secret = cast.token(cast.carol, ["run"])
    r = client.post(
        "/api/v1/workspaces/probe/previews",
        {},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {secret}",
    )
    assert r.status_code == 403 and r.json()["error"]["code"] == "missing_scope"
    _, other = cast.token(cast.charlie, ["preview"])
    r = client.get("/api/v1/previews/zzzzzzzzzzzz", HTTP_AUTHORIZATION=f"Bearer {other}")
    assert r.status_code == 404


def test_a_body_past_the_cap_is_refused_before_the_app_sees_it(agent, ready, berth_server):
    browser = opened(berth_server, agent, ready)
    r = browser.request(
        "POST", ready["url"] + "echo", data=b"x" * (9 << 20), headers={"Accept": "application/json"}
    )
    assert r.status_code == 413 and r.json()["error"]["code"] == "too_large"
    assert "8 MB" in r.json()["error"]["message"]


def test_the_preview_log_streams_over_the_websocket(agent, ready, berth_server, cast):
    import asyncio

    from websockets.asyncio.client import connect
    from websockets.typing import Origin

    async def first_entries() -> list[dict]:
        async with connect(
            f"ws://127.0.0.1:{berth_server.port}/ws/previews/{ready['id']}/logs?after=0",
            proxy=None,
            origin=Origin("http://localhost"),
            additional_headers={"Authorization": agent.headers["HTTP_AUTHORIZATION"]},
        ) as ws:
            message = json.loads(await asyncio.wait_for(ws.recv(), 10))
            assert message["type"] == "entries"
            return message["entries"]

    entries = asyncio.run(first_entries())
    assert any("probe app listening" in e["text"] for e in entries)
    # charlie's token: closed with 4404, as for a run of another team.
    _, other = cast.token(cast.charlie, ["preview"])

    async def refused() -> int | None:
        async with connect(
            f"ws://127.0.0.1:{berth_server.port}/ws/previews/{ready['id']}/logs",
            proxy=None,
            origin=Origin("http://localhost"),
            additional_headers={"Authorization": f"Bearer {other}"},
        ) as ws:
            with pytest.raises(Exception):
                await asyncio.wait_for(ws.recv(), 10)
            return ws.close_code

    assert asyncio.run(refused()) == 4404


def test_another_team_never_sees_a_preview(agent, ready, cast, client):
    _, other = cast.token(cast.charlie, ["preview", "workspace:read"])
    headers = {"HTTP_AUTHORIZATION": f"Bearer {other}"}
    for path in (f"/api/v1/previews/{ready['id']}", f"/api/v1/previews/{ready['id']}/logs"):
        assert client.get(path, **headers).status_code == 404
    for action in ("stop", "restart", "link"):
        r = client.post(
            f"/api/v1/previews/{ready['id']}/{action}",
            {},
            content_type="application/json",
            **headers,
        )
        assert r.status_code == 404, action
    assert client.get("/api/v1/workspaces/probe/previews", **headers).status_code == 404
