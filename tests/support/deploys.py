"""Deploys as an agent asks and a reviewer approves them, and the release they serve."""

import requests

from tests.support.api import bearer
from tests.support.servers import wait_for

HOST = "shop--team-a.apps.localhost"
PAGE = "/t/team-a/w/shop/deploys/"
ENDED = {"live", "failed", "rejected", "cancelled"}


def app(text: str, health: int = 200) -> str:
    """The python-http starter's shape: a stdlib server on 127.0.0.1:8000."""
    return f"""from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class H(BaseHTTPRequestHandler):
    def do_GET(self):
        body = {text!r}.encode()
        self.send_response({health} if self.path == "/health" else 200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass

ThreadingHTTPServer(("127.0.0.1", 8000), H).serve_forever()
"""


TOML = (
    '[setup]\ncommand = "python3 -m venv --without-pip /deps/venv"\n\n'
    '[deploy]\ncommand = "/deps/venv/bin/python app.py"\nport = 8000\n'
    'health_path = "/health"\n'
)


class Requester:
    """alice's agent: a token with `deploy:request`, and nothing that approves."""

    def __init__(self, client, secret: str) -> None:
        self.client, self.headers = client, bearer(secret)

    def ask(self, note: str = "", ref: str | None = None) -> dict:
        r = self.client.post(
            "/api/v1/workspaces/shop/deploys",
            {"note": note, **({"ref": ref} if ref else {})},
            content_type="application/json",
            **self.headers,
        )
        assert r.status_code == 201, r.content
        return r.json()

    def get(self, deploy: dict) -> dict:
        r = self.client.get(f"/api/v1/deploys/{deploy['id']}", **self.headers)
        assert r.status_code == 200, r.content
        return r.json()

    def wait(self, deploy: dict, states: set[str] = ENDED, timeout: float = 180) -> dict:
        return wait_for(
            lambda: self.get(deploy),
            timeout,
            interval=0.2,
            what=f"deploy {deploy['id']} to be in {states}",
            until=lambda current: current["state"] in states,
        )


def served(server, path: str = "/") -> requests.Response:
    """The release host, through the preview gateway (the only door to releases)."""
    return requests.get(
        f"http://127.0.0.1:{server.gateway_port}{path}",
        headers={"Host": HOST},
        timeout=30,
        allow_redirects=False,
    )


def approve(signed_in, user, deploy: dict, **extra):
    return signed_in(user).post(f"{PAGE}{deploy['id']}/approve/", extra, follow=True)


def released(agent, signed_in, cast, note: str) -> dict:
    deploy = agent.ask(note)
    approve(signed_in, cast.bob, deploy)
    done = agent.wait(deploy)
    assert done["state"] == "live", done
    return done
