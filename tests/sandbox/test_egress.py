"""Egress allowlists (issue 7): a sandbox reaches only what its team and workspace
chose, through the proxy the runner agent serves inside the sandbox's own namespace;
every connection tried is recorded, every refusal is typed. Real Docker, both runtimes.

The stack's operator settings (tests/support/servers.py): files.test and index.test map to
127.0.0.1, meta.test to 169.254.169.254; only 127.0.0.1 is an allowed address; each
run may move 8 MB and hold 6 connections.
"""

from collections.abc import Iterator

import pytest

from accounts.access import Actor
from runs.models import EgressEvent
from tests.support.egress import policy, run
from tests.support.registries import Registry
from tests.support.runs import Agent
from tests.support.servers import wait_for
from workspaces import actions as workspace_actions

RUNTIMES = ["runc", "gvisor"]


@pytest.fixture
def shop(cast):
    return workspace_actions.create_workspace(
        cast.team_a, Actor(cast.carol), "Shop", "shop", "python-http"
    )


@pytest.fixture
def agent(client, cast, shop, run_stack):
    _, secret = cast.token(cast.carol, ["workspace:read", "workspace:write", "run"])
    return Agent(client, secret)


def events(run: dict, at_least: int, timeout: float = 10) -> list[EgressEvent]:
    """The run's connection records (written as each connection ends, maybe just after
    the run's own end)."""
    return wait_for(
        lambda: list(EgressEvent.objects.filter(run__public_id=run["id"])),
        timeout,
        what=f"{at_least} connection records of run {run['id']}",
        until=lambda found: len(found) >= at_least,
    )


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_an_allowlisted_host_is_reached_through_the_proxy_and_recorded(
    agent, cast, shop, files, runtime
):
    policy(shop, cast, [f"files.test:{files}"], runtime)
    done, out = run(
        agent, f"curl -sS -i -H 'Proxy-Authorization: Basic eA==' http://files.test:{files}/x"
    )
    assert done["state"] == "succeeded", (done, out)
    assert "hello through the proxy" in out
    assert f"X-Seen-Host: files.test:{files}" in out
    assert "X-Seen-Proxy-Authorization: none" in out  # meant for the proxy: not passed on
    assert done["network"]["mode"] == "proxy"
    assert done["network"]["egress"] == [f"files.test:{files}"]
    [event] = events(done, 1)
    assert (event.allowed, event.method, event.host, event.port, event.address, event.reason) == (
        True,
        "GET",
        "files.test",
        files,
        "127.0.0.1",
        "",
    )
    assert event.bytes_up > 50 and event.bytes_down > 24 and event.ended_at
    detail = agent.get(f"/runs/{done['id']}").json()["egress"]
    assert (detail["connections"], detail["denied"]) == (1, 0)
    assert detail["offered_at"] and detail["bytes_down"] == event.bytes_down
    assert detail["events"][0]["kind"] == "egress_allowed"


def test_a_host_off_the_list_gets_a_typed_403_and_an_egress_denied_event(agent, cast, shop, files):
    policy(shop, cast, ["files.test:1"])
    done, out = run(
        agent,
        f"curl -sS -i http://files.test:{files}/x; "
        f"curl -sS https://files.test:{files}/ 2>&1; echo exit=$?",
    )
    assert done["state"] == "succeeded", (done, out)
    assert "HTTP/1.1 403" in out and "x-berth-egress: not_allowed" in out
    assert f'add "files.test:{files}" to [network] egress in workspace.toml' in out
    assert "CONNECT tunnel failed, response 403" in out and "exit=56" in out
    denied = events(done, 2)
    assert [(e.allowed, e.method, e.host, e.port, e.reason) for e in denied] == [
        (False, "GET", "files.test", files, "not_allowed"),
        (False, "CONNECT", "files.test", files, "not_allowed"),
    ]
    assert all(e.address == "" and e.bytes_down == 0 for e in denied)  # never resolved
    api = agent.get(f"/runs/{done['id']}/egress").json()
    assert [e["kind"] for e in api["events"]] == ["egress_denied", "egress_denied"]
    assert api["summary"]["denied"] == 2


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_without_the_proxy_nothing_is_reachable_and_fails_at_once(
    agent, cast, shop, files, runtime
):
    policy(shop, cast, [f"files.test:{files}"], runtime)
    script = (
        "import socket, time\n"
        "t = time.monotonic()\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {files}), timeout=20)\n"
        "    print('connected')\n"
        "except OSError as e:\n"
        "    print(type(e).__name__, round(time.monotonic() - t, 1))\n"
    )
    done, out = run(
        agent,
        f"python3 -c \"{script}\"; curl -sS --noproxy '*' http://files.test:{files}/x 2>&1; true",
    )
    assert done["state"] == "succeeded", (done, out)
    # Refused by the sandbox's own loopback, not a timeout: there is no route out.
    assert "ConnectionRefusedError" in out and "connected" not in out
    assert "Could not resolve host: files.test" in out
    assert events(done, 0) == []


def test_a_listed_name_whose_address_is_not_allowed_is_refused_without_connecting(
    agent, cast, shop
):
    policy(shop, cast, ["meta.test:80", "meta.test"])
    done, out = run(agent, "curl -sS -i http://meta.test/latest/meta-data/")
    assert done["state"] == "succeeded", (done, out)
    assert "HTTP/1.1 403" in out and "x-berth-egress: address_not_allowed" in out
    assert "meta.test resolves to 169.254.169.254" in out
    [event] = events(done, 1)
    assert (event.allowed, event.reason, event.address, event.bytes_down) == (
        False,
        "address_not_allowed",
        "169.254.169.254",
        0,
    )


def test_entries_outside_the_team_ceiling_are_ignored_and_said_on_the_run(
    agent, cast, shop, files, signed_in
):
    policy(shop, cast, [f"files.test:{files}", "other.test"], ceiling=["*.example.com"])
    done, out = run(
        agent,
        f"curl -sS -o /dev/null -w '%{{http_code}}' "
        f"http://files.test:{files}/x 2>&1; echo; "
        "env | grep -ci proxy || true",
    )
    assert done["network"]["mode"] == "none"
    assert done["network"]["ignored"] == [f"files.test:{files}", "other.test"]
    assert any('"other.test" is outside the team\'s egress ceiling' in w for w in done["warnings"])
    # No policy left, so no proxy and no proxy variables: curl cannot even resolve.
    assert "Could not resolve host: files.test" in out
    assert "000" in out and out.splitlines()[-1] == "0"

    cast.team_a.egress_ceiling = ["*.test:" + str(files)]
    cast.team_a.save()
    done, out = run(agent, f"curl -sS http://files.test:{files}/x")
    assert done["network"]["egress"] == [f"files.test:{files}"]
    assert done["network"]["ignored"] == ["other.test"]
    assert "hello through the proxy" in out
    page = signed_in(cast.carol).get(f"/t/team-a/w/shop/runs/{done['id']}/").content.decode()
    assert "Egress only through Berth's proxy" in page and "other.test" in page
    assert f"GET files.test:{files}" in page


def test_the_byte_cap_cuts_the_connection_and_the_run_goes_on(agent, cast, shop, files):
    policy(shop, cast, [f"files.test:{files}"])
    done, out = run(
        agent,
        f"curl -sS -o /dev/null http://files.test:{files}/big/20000000 "
        f"2>&1; echo first=$?; curl -sS -i http://files.test:{files}/x; "
        "echo second=$?",
    )
    assert done["state"] == "succeeded", (done, out)
    assert "first=18" in out  # curl: transfer closed with data outstanding
    assert "x-berth-egress: byte_cap" in out and "second=0" in out
    cut, refused = events(done, 2)
    assert (cut.allowed, cut.reason) == (True, "byte_cap")
    assert 7 * 2**20 < cut.bytes_down <= 8 * 2**20 + 256 * 1024
    assert (refused.allowed, refused.reason) == (False, "byte_cap")


def test_the_connection_cap_refuses_one_more_and_the_run_goes_on(agent, cast, shop, files):
    policy(shop, cast, [f"files.test:{files}"])
    # Seven tunnels held open at once; the limit is six.
    script = (
        "import socket\n"
        "held = []\n"
        "for i in range(7):\n"
        "    s = socket.create_connection(('127.0.0.1', 3128))\n"
        f"    s.sendall(b'CONNECT files.test:{files} HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n')\n"
        "    print(i, s.recv(200).split(b'\\r\\n')[0].decode())\n"
        "    held.append(s)\n"
    )
    done, out = run(agent, f'python3 -c "{script}"; echo went-on')
    assert done["state"] == "succeeded", (done, out)
    lines = out.splitlines()
    assert lines[:6] == [f"{i} HTTP/1.1 200 Connection Established" for i in range(6)]
    assert lines[6] == "6 HTTP/1.1 429 Too Many Requests" and lines[-1] == "went-on"
    recorded = events(done, 7)
    assert sorted(e.reason for e in recorded) == [""] * 6 + ["connection_cap"]


@pytest.fixture
def registry() -> Iterator[Registry]:
    """A PEP 503 index and an npm registry on 127.0.0.1, reached as index.test:<port>."""
    with Registry() as served:
        yield served


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_pip_installs_from_an_allowlisted_index_through_the_proxy(
    agent, cast, shop, registry, runtime
):
    port = registry.port
    policy(shop, cast, [f"index.test:{port}"], runtime)
    done, out = run(
        agent,
        (
            f"python3 -m pip install --quiet --no-cache-dir --disable-pip-version-check "
            f"--target /workspace/pkgs --index-url http://index.test:{port}/simple/ "
            f"--trusted-host index.test berthdemo 2>&1 && "
            "PYTHONPATH=/workspace/pkgs python3 -c 'import berthdemo; print(berthdemo.GREETING)'"
        ),
    )
    assert done["state"] == "succeeded", (done, out)
    assert "hello from berthdemo" in out
    assert "/simple/berthdemo/" in registry.requests
    assert f"/files/{registry.wheel_name}" in registry.requests
    recorded = events(done, 2)
    assert recorded and all(e.allowed and e.host == "index.test" for e in recorded)
    assert sum(e.bytes_down for e in recorded) > len(registry.wheel)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_npm_installs_from_an_allowlisted_registry_through_the_proxy(
    agent, cast, shop, registry, runtime
):
    port = registry.port
    policy(shop, cast, [f"index.test:{port}"], runtime)
    done, out = run(
        agent,
        (
            'cd /workspace && mkdir app && cd app && echo \'{"name": "app"}\' > package.json && '
            f"npm install --registry http://index.test:{port}/ --cache /tmp/npm-cache "
            "--no-audit --no-fund --no-update-notifier --loglevel=error berth-demo 2>&1 && "
            "node -e 'console.log(require(\"berth-demo\"))'"
        ),
    )
    assert done["state"] == "succeeded", (done, out)
    assert "hello from berth-demo" in out
    assert "/berth-demo" in registry.requests
    assert f"/berth-demo/-/{registry.tarball_name}" in registry.requests
    assert all(e.allowed for e in events(done, 2))
