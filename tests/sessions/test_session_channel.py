"""The exec channel serves the runner agent alone (docs/security.md, 32), and the session
run's log holds only what the channel signed and follows the session's grant (26).

A process of the sandbox reaches 127.0.0.1:61001 as easily as the agent does; it gets
nothing there without the key the agent handed the channel at its first ping. The
agent keeps using the same key after a restart (never a second keying), and a channel
that cannot prove it ends its session `lost`.
"""

import base64
import json
import os

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings

from runs.models import Run
from sandbox.models import Sandbox
from tests.support.api import bearer
from tests.support.logs import closed_with
from tests.support.logs import connect as watch
from tests.support.mcp import connect as mcp
from tests.support.secrets import VALUE
from tests.support.servers import wait_for
from tests.support.sessions import SessionAgent, container_of, lines
from tests.support.terminals import Screen, open_socket

pytestmark = pytest.mark.docker

# Run inside the sandbox: each attempt's whole answer, up to the channel closing.
ATTEMPTS = """
import base64, json, os, socket, sys
term = sys.argv[1]
typed = base64.b64encode(b'touch /tmp/typed\\r').decode()
def talk(requests, hello=True):
    s = socket.create_connection(('127.0.0.1', 61001))
    s.settimeout(10)
    f = s.makefile('rwb')
    if hello:
        f.write(json.dumps({'op': 'hello', 'nonce': os.urandom(16).hex()}).encode() + b'\\n')
    for r in requests:
        f.write(json.dumps(r).encode() + b'\\n')
    f.flush()
    try:
        return f.read().decode(errors='replace')
    except Exception as e:
        return repr(e)
print(json.dumps([
    talk([{'op': 'pty_list'}], hello=False),
    talk([{'op': 'pty_list', 'proof': '0' * 64}]),
    talk([{'op': 'pty_attach', 'id': term, 'after': 0, 'proof': 'x'}, {'i': typed}]),
    talk([{'op': 'exec', 'id': 'zzzzzzzzzzzz', 'command': 'echo forged'}]),
    talk([{'op': 'key', 'key': '00' * 32}]),
    talk([{'op': 'key', 'key': '00' * 32}], hello=False),
]))
"""


def secret_of(agent: SessionAgent) -> str:
    return agent.headers["HTTP_AUTHORIZATION"].removeprefix("Bearer ")


def run_log(agent: SessionAgent, session: dict) -> list[str]:
    page = agent.get(f"/runs/{session['run']}/logs?limit=5000")
    assert page.status_code == 200, page.content
    return [e["text"] for e in page.json()["entries"]]


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
def test_a_process_in_the_session_gets_nothing_from_the_channel(agent, berth_server, runtime):
    session = agent.ready(runtime=runtime)
    term = agent.post(f"/sessions/{session['id']}/terminals").json()
    with open_socket(berth_server, term["id"], secret_of(agent)) as ws:
        screen = Screen(ws)
        screen.read_until(lambda m: m["type"] == "attached")
        screen.type("echo token-$((40+2))-typed-here\r")
        screen.read_until("token-42-typed-here")

        script = base64.b64encode(ATTEMPTS.encode()).decode()
        agent.exec(session, f"echo {script} | base64 -d > /tmp/attempts.py")
        tried = agent.exec(session, f"python3 /tmp/attempts.py {term['id']}")
        assert tried["reason"] == "exit_zero", tried
        answers = json.loads(lines(tried)[0])
        for answer in answers:
            # Refused and closed: no terminal list, no scrollback, no exec, no key.
            assert '"error": "unproven"' in answer, answers
            for leak in ("token-42", term["id"], '"pid"', '"terminals"', "forged"):
                assert leak not in answer, (leak, answers)
        # The hello is answered (with the channel's proof, useless without the key).
        assert '"keyed": true' in answers[1]

        # Nothing was typed into the shell; Berth's own terminal and execs still work.
        assert agent.cat(session, "/tmp/typed") == "<absent>"
        screen.type("echo after-$((1+1))\r")
        screen.read_until("after-2")
    assert lines(agent.exec(session, "echo still")) == ["still"]
    # Keyed once, at its first ping.
    assert Sandbox.objects.get(
        public_id=Run.objects.get(public_id=session["run"]).sandbox.public_id
    ).channel_keyed_at
    assert container_of(session["run"]).logs().count(b"\x1e_ e 1 ") == 1


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
def test_a_channel_that_cannot_prove_its_key_ends_its_session_lost(agent, run_stack, runtime):
    """The host's channel secret replaced while a session runs (a data directory
    restored without it): the agent cannot make the key the channel was handed, sends
    it nothing, and the session ends `lost` — it is not keyed a second time. A start
    again is a new sandbox, keyed anew."""
    session = agent.ready(runtime=runtime)
    sandbox = Run.objects.get(public_id=session["run"]).sandbox
    keyed_at = Sandbox.objects.get(pk=sandbox.pk).channel_keyed_at
    path = settings.DATA_DIR / "session-channel.key"
    saved = path.read_bytes()
    run_stack.agent.kill()
    try:
        path.write_text(os.urandom(32).hex())
        run_stack.agent.start()
        row = agent.exec(session, "touch /workspace/ran", status=None)
        ended = agent.wait_exec(row, timeout=120)
        assert ended["reason"] == "not_started", ended
        lost = agent.wait_state(session, "lost", timeout=120)
        assert lost["reason"] == "channel_unproven", lost
        assert "prove" in lost["message"]
        assert Sandbox.objects.get(pk=sandbox.pk).channel_keyed_at == keyed_at
        r = agent.post(f"/sessions/{session['id']}/start")
        assert r.status_code == 202, r.content
        agent.wait_state(session, "ready", timeout=180)
        assert agent.cat(session, "/workspace/ran") == "<absent>", "the exec never ran"
    finally:
        run_stack.agent.kill()
        path.write_bytes(saved)
        run_stack.agent.start()


def test_unsigned_lines_after_ready_are_dropped_from_the_run_log_and_counted(
    client, cast, api_key, run_stack
):
    """gVisor only: under runc the sandbox user cannot open /proc/1/fd/1 for writing
    (test_session_doors.py shows the refusal)."""
    _, granter = cast.token(
        cast.carol, ["workspace:read", "workspace:write", "run"], secret_names=["API_KEY"]
    )
    agent = SessionAgent(client, granter)
    session = agent.ready(runtime="gvisor")
    written = agent.exec(
        session,
        'printf "unsigned-1\\nunsigned-2\\n" > /proc/1/fd/1; echo "leak $API_KEY" > /proc/1/fd/2'
        " && echo written",
        secrets=["API_KEY"],
    )
    assert lines(written) == ["written"], written
    held = container_of(session["run"]).logs()
    assert b"unsigned-2" in held, "the engine keeps them"

    def noted() -> bool:
        return any("(3 since" in t for t in run_log(agent, session))

    wait_for(noted, 30, what="the dropped lines to be counted in the run's log")
    logged = run_log(agent, session)
    assert not any("unsigned" in t or "leak" in t or VALUE in t for t in logged), logged
    assert "[berth] the exec channel is keyed: it serves only the runner agent" in logged


def test_a_session_run_is_read_only_by_those_who_cover_the_session(
    client, cast, api_key, run_stack, berth_server
):
    """Its doors (API run and log, the run's log socket, MCP) follow the session's grant;
    runc alone: nothing here depends on the runtime."""
    _, granter = cast.token(
        cast.carol, ["workspace:read", "workspace:write", "run"], secret_names=["API_KEY"]
    )
    agent = SessionAgent(client, granter)
    session = agent.ready()
    agent.exec(session, "true", secrets=["API_KEY"])
    run_id = session["run"]
    assert agent.get(f"/runs/{run_id}").status_code == 200
    assert run_log(agent, session)
    # Not copied into the run's own grants: those go into its container's env.
    assert Run.objects.get(public_id=run_id).secret_names == []

    _, other = cast.token(cast.carol, ["workspace:read", "workspace:write", "run"])
    for path in (f"/runs/{run_id}", f"/runs/{run_id}/logs"):
        r = client.get(f"/api/v1{path}", **bearer(other))
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", path
    listed = client.get("/api/v1/workspaces/shop/runs", **bearer(other)).json()
    assert run_id not in [r["id"] for r in listed]

    run = Run.objects.get(public_id=run_id)

    async def refused() -> None:
        ws = await watch(run, secret=other)
        assert await closed_with(ws) == 4404
        await ws.disconnect()

    async_to_sync(refused)()

    async def body(mcp_agent) -> None:
        for tool in ("get_run", "read_run_log"):
            error = await mcp_agent.error(tool, run_id=run_id)
            assert error["code"] == "not_found", (tool, error)

    mcp(berth_server, other, body)
