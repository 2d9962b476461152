"""Helpers for preview tests: an agent's API client and a browser-like client of the
preview gateway (`*.preview.localhost` does not resolve outside a browser here, so
requests go to 127.0.0.1 with the preview's Host header)."""

import http.client
import socket
from http.cookies import SimpleCookie
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests

from accounts.access import Actor
from tests.support.api import bearer
from tests.support.servers import wait_for
from workspaces import actions as workspace_actions
from workspaces.changes import Change

PROBE_APP = (Path(__file__).parent / "apps" / "probe_app.py").read_text()
LIVE = {"starting"}


def probe_toml(
    command: str = "python3 probe_app.py",
    port: int = 8000,
    health_path: str = "/",
    runtime: str = "runc",
) -> str:
    return (
        f'[sandbox]\nruntime = "{runtime}"\nmemory_mb = 256\n\n'
        f'[preview]\ncommand = "{command}"\nport = {port}\nhealth_path = "{health_path}"\n'
    )


def write(workspace, user, files: dict[str, str]) -> str:
    result = workspace_actions.commit_changes(
        workspace,
        Actor(user),
        [Change("write", p, c.encode()) for p, c in files.items()],
        "change " + ", ".join(files),
    )
    return result.sha


class PreviewAgent:
    """An API client acting through a token with the `preview` scope."""

    def __init__(self, client, secret: str, slug: str) -> None:
        self.client, self.headers, self.slug = client, bearer(secret), slug

    def start(self, **body) -> dict:
        r = self.client.post(
            f"/api/v1/workspaces/{self.slug}/previews",
            body,
            content_type="application/json",
            **self.headers,
        )
        assert r.status_code == 202, r.content
        return r.json()

    def get(self, preview: dict | str) -> dict:
        pid = preview if isinstance(preview, str) else preview["id"]
        r = self.client.get(f"/api/v1/previews/{pid}", **self.headers)
        assert r.status_code == 200, r.content
        return r.json()

    def post(self, preview: dict, action: str, body: dict | None = None):
        return self.client.post(
            f"/api/v1/previews/{preview['id']}/{action}",
            body or {},
            content_type="application/json",
            **self.headers,
        )

    def wait(self, preview: dict, states: set[str], timeout: float = 120) -> dict:
        return wait_for(
            lambda: self.get(preview),
            timeout,
            interval=0.1,
            what=f"preview {preview['id']} to be in {states}",
            until=lambda current: current["state"] in states,
        )

    def link(self, preview: dict) -> str:
        r = self.post(preview, "link")
        assert r.status_code == 200, r.content
        return r.json()["url"]


class Browser:
    """Talks to preview hosts the way a browser would: keeps the cookies the preview
    host sets, sends them back, never follows redirects by itself. It asks the preview
    gateway (the port preview URLs name: the only door to previews)."""

    def __init__(self, server) -> None:
        self.server = server
        self.port = server.gateway_port
        self.cookies: dict[str, str] = {}

    def request(self, method: str, url: str, headers: dict | None = None, **kwargs):
        parts = urlsplit(url)
        host = parts.netloc
        target = f"http://127.0.0.1:{self.port}{parts.path or '/'}" + (
            f"?{parts.query}" if parts.query else ""
        )
        sent = {"Host": host, **(headers or {})}
        if self.cookies and "Cookie" not in sent:
            sent["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        r = requests.request(
            method, target, headers=sent, allow_redirects=False, timeout=60, **kwargs
        )
        for header in r.raw.headers.getlist("Set-Cookie"):
            jar: SimpleCookie = SimpleCookie()
            jar.load(header)
            for name, morsel in jar.items():
                self.cookies[name] = morsel.value
        return r

    def get(self, url: str, **kwargs):
        return self.request("GET", url, **kwargs)

    def open(self, link: str):
        """Follow a ticket link: one redirect on the preview host, with its cookie."""
        r = self.get(link)
        assert r.status_code == 302, (r.status_code, r.text[:300])
        return r


ENDED = {"failed", "stopped", "crashed"}


both_runtimes = pytest.mark.parametrize("runtime", ["runc", "gvisor"], indirect=True)


def opened(berth_server, agent, preview) -> Browser:
    browser = Browser(berth_server)
    browser.open(agent.link(preview))
    return browser


class KeptAlive:
    """One connection to the preview gateway, kept open between requests (as a
    browser's): every request asserts it went on that same connection."""

    def __init__(self, port: int, preview: dict, cookie: str) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.headers = {
            "Host": f"{preview['id']}.preview.localhost",
            "Cookie": cookie,
            "Accept": "application/json",
        }
        self.sock: socket.socket | None = None

    def get(self, path: str = "/") -> tuple[int, str]:
        self.conn.request("GET", path, headers=self.headers)
        r = self.conn.getresponse()
        body = r.read().decode(errors="replace")
        self.sock = self.sock or self.conn.sock
        assert self.conn.sock is self.sock, "a new connection: not a kept-alive request"
        return r.status, body

    def close(self) -> None:
        self.conn.close()


def cookie_header(browser: Browser) -> str:
    """The Cookie header a browser would send: the preview cookies it holds."""
    return "; ".join(f"{k}={v}" for k, v in browser.cookies.items())
