"""Only the preview gateway connects into sandboxes; daphne decides and never enters a
sandbox's network namespace. Real daphne, gateway, Celery worker, runner agent and
Docker.

How it is told: a socket made inside a sandbox's namespace is listed in that
namespace's TCP table (/proc/<a process in it>/net/tcp), and the process holding it
has it among its descriptors (/proc/<pid>/fd, `socket:[inode]`). So while a live
preview serves a page (its connection kept alive for the next) and holds an open
WebSocket through the gateway, every socket of the namespace on the app's port that
is not the app's own belongs to the gateway's process, and none to daphne's. Before
this was so, daphne's proxy kept its own pooled connections there, and this test
would have found them.
"""

import asyncio
import os
import socket

import pytest
import requests
from django.conf import settings
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from previews import gate
from previews.models import Preview
from tests.support.previews import Browser

pytestmark = pytest.mark.docker


def sockets_of(pid: int) -> set[int]:
    """The inodes of the sockets a process holds open."""
    held = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            held.add(int(target[8:-1]))
    return held


def connections_on(pid: int, port: int) -> set[int]:
    """The inodes of the TCP sockets in `pid`'s network namespace with `port` at
    either end (listening ones left out)."""
    found = set()
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as f:
            next(f)
            for line in f:
                fields = line.split()
                local, remote, state, inode = fields[1], fields[2], fields[3], int(fields[9])
                ends = {int(local.rsplit(":", 1)[1], 16), int(remote.rsplit(":", 1)[1], 16)}
                if port in ends and state != "0A" and inode:  # 0A: LISTEN
                    found.add(inode)
    return found


def test_only_the_gateway_connects_into_a_sandbox(agent, ready, berth_server):
    browser = Browser(berth_server)
    browser.open(agent.link(ready))
    assert browser.get(ready["url"] + "headers").status_code == 200
    cookie = "; ".join(f"{k}={v}" for k, v in browser.cookies.items())
    preview = Preview.objects.get(public_id=ready["id"])
    inside = preview.sandbox_pid

    async def story() -> tuple[set[int], set[int], set[int]]:
        sock = socket.create_connection(("127.0.0.1", berth_server.gateway_port))
        async with connect(
            f"ws://{ready['id']}.preview.localhost:{settings.PREVIEW_PORT}/ws",
            sock=sock,
            proxy=None,
            additional_headers={"Cookie": cookie},
        ) as ws:
            await ws.send("hello")
            assert await asyncio.wait_for(ws.recv(), 10) == "echo:hello"
            # Looked at while the tunnel is open and the page's connection is kept.
            return (
                connections_on(inside, preview.port),
                sockets_of(berth_server.gateway_pid),
                sockets_of(berth_server.pid),
            )

    in_sandbox, gateways, daphnes = asyncio.run(story())
    # The page's kept connection and the tunnel: the gateway's, seen from inside.
    assert len(in_sandbox & gateways) >= 2, (in_sandbox, gateways)
    assert not in_sandbox & daphnes, "daphne holds a socket inside the sandbox"
    # What is not the gateway's is the app's own end of those connections.
    assert len(in_sandbox - gateways) == len(in_sandbox & gateways)


def test_daphne_turns_preview_hosts_away_unless_the_gateway_asks(ready, berth_server):
    host = f"{ready['id']}.preview.localhost:{berth_server.port}"
    for forged in ({}, {"X-Berth-Gateway": "forged", "X-Berth-Client": "6.6.6.6"}):
        r = requests.get(
            f"http://127.0.0.1:{berth_server.port}/",
            headers={"Host": host, "Accept": "application/json", **forged},
            timeout=30,
        )
        assert r.status_code == 421 and r.json()["error"]["code"] == "not_served_here"
        assert str(settings.PREVIEW_PORT) in r.json()["error"]["message"]

    async def straight_to_daphne() -> None:
        sock = socket.create_connection(("127.0.0.1", berth_server.port))
        async with connect(f"ws://{host}/ws", sock=sock, proxy=None):
            pass

    with pytest.raises(InvalidStatus):
        asyncio.run(straight_to_daphne())
    # The gateway's own key is what makes it a question (and its verdict is no page).
    r = requests.get(
        f"http://127.0.0.1:{berth_server.port}/",
        headers={
            "Host": host,
            "X-Berth-Gateway": gate.gateway_key().decode(),
            "X-Berth-Client": "127.0.0.1",
        },
        allow_redirects=False,
        timeout=30,
    )
    assert r.status_code == 302 and f"/previews/{ready['id']}/open" in r.headers["Location"]
