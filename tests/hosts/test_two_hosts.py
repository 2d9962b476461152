"""Two hosts on one machine (docs/hosts.md): engine B beside engine A, with B's own
runner agent, Celery worker and preview gateway, sharing the database and Redis. One
module, so one worker of the suite starts B once (`--dist loadfile`).

This host (`local`, engine A) is drained in each test: new work goes to b. Both hosts
share one kernel, so "A never touched B's work" is shown by rows and counts, never by
a failed connect."""

import asyncio
import io
import re
from pathlib import Path
from types import SimpleNamespace

import docker
import pytest
from django.conf import settings
from django.core.management import call_command

from accounts.access import Actor
from agent.loop import Agent
from core import broker, keys
from previews.models import Preview
from runs import caches
from runs.models import DepCache, Run
from runs.tasks import evict_caches
from sandbox.engine import engine
from sandbox.hosts import Host, HostState
from sandbox.models import Sandbox, SandboxKind
from sessions.models import Session
from tests.support import engine_b
from tests.support.previews import ENDED, PROBE_APP, Browser, PreviewAgent, probe_toml, write
from tests.support.runs import Agent as RunAgent
from tests.support.runs import engine_output, set_toml, wait_for_output
from tests.support.secrets import VALUE
from tests.support.servers import wait_for
from tests.support.sessions import SessionAgent, lines
from tests.support.terminals import Screen, open_socket
from workspaces import actions as workspace_actions

STARTERS = Path(__file__).resolve().parents[2] / "workspaces" / "starters"

# Hosts share their state in PostgreSQL (a runner host refuses SQLite): this module runs
# in the PostgreSQL pass.
pytestmark = [pytest.mark.docker, pytest.mark.postgres]


@pytest.fixture(scope="module")
def b_stack(_daphne, _run_stack, django_db_blocker):
    keys.make_shared()  # as the web host's `manage.py prepare` does: B finds them
    with django_db_blocker.unblock():
        host, _ = Host.objects.get_or_create(name=engine_b.NAME)  # its agent claims it
        token = host.issue_token()
        database_url = engine_b.runner_database_url()
    with engine_b.host_b(_daphne.port, database_url, token) as b:
        b.token = token
        yield b


@pytest.fixture
def b(b_stack, run_stack, cast):
    """Host b's row as its agent beats it (a test's flush removed it: added again, as an
    operator would), and this host draining."""
    host, _ = Host.objects.get_or_create(name=engine_b.NAME)
    host.keep_token(b_stack.token)  # the flush took its digest: B holds the same
    wait_for(
        lambda: Host.objects.filter(name=engine_b.NAME, heartbeat_at__isnull=False).first(),
        30,
        what="host b's heartbeat",
        until=lambda host: host is not None and host.has_gvisor,
    )
    cast.host.drain()
    return b_stack


@pytest.fixture
def shop(cast):
    return workspace_actions.create_workspace(
        cast.team_a, Actor(cast.carol), "Shop", "shop", "python-http"
    )


@pytest.fixture
def agent(client, cast, shop):
    _, secret = cast.token(
        cast.carol, ["workspace:read", "workspace:write", "run"], secret_names=["API_KEY"]
    )
    return RunAgent(client, secret)


def sandbox_of(run_id: str, kind: str = SandboxKind.RUN) -> Sandbox:
    return Sandbox.objects.get(owner_kind="run", owner_id=run_id, kind=kind)


def on_engine(client: docker.DockerClient, name: str) -> bool:
    try:
        client.containers.get(name)
    except docker.errors.NotFound:
        return False
    return True


def holds_nothing_of_the_web_hosts(b) -> None:
    """B's processes see the web host's DATA_DIR as an empty tmpfs (their mount
    namespace), and their own, empty at B's start, holds only B's own state: the
    session followers' cursors. Listed whole in the failure."""
    mounts = Path(f"/proc/{b.agent.proc.pid}/mountinfo").read_text().splitlines()
    hidden = [m for m in mounts if m.split()[4] == str(settings.DATA_DIR)]
    assert hidden and " - tmpfs " in hidden[-1], hidden
    found = sorted(str(p.relative_to(b.state_dir)) for p in b.state_dir.rglob("*") if p.is_file())
    mine = re.compile(rf"hosts/{engine_b.NAME}/session-cursors/[a-z0-9]+\.cursor")
    assert all(mine.fullmatch(f) for f in found), found


def grant_api_key(client, cast) -> None:
    """API_KEY set by an admin, and granted by carol's tokens (`agent`, the sessions')."""
    _, admin = cast.token(cast.alice, ["workspace:read", "workspace:write"])
    r = client.put(
        "/api/v1/workspaces/shop/secrets/API_KEY",
        {"value": VALUE},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {admin}",
    )
    assert r.status_code in (200, 201), r.content


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
def test_a_run_placed_on_b_ends_normally_while_as_agent_reconciles(
    b, agent, client, cast, shop, runtime
):
    """With `[setup]`, artifacts and a granted secret: sealed for b, opened by b alone
    (its processes hold no workspace secrets key: any use of it there fails), masked in
    the run's log, withheld from its outputs, which the web host reads."""
    toml = (STARTERS / "python-http" / "workspace.toml").read_text()
    set_toml(shop, cast, toml + '\n[artifacts]\npaths = ["dist"]\n')
    grant_api_key(client, cast)
    run = agent.run(
        'echo started; echo "key=$API_KEY"; sleep 12; echo made > made-on-b.txt; '
        'mkdir dist && echo art > dist/a.txt && echo "$API_KEY" > leaked.txt; echo done',
        runtime=runtime,
        secrets=["API_KEY"],
    )
    assert wait_for_output(agent, run, "started")
    row = Run.objects.get(public_id=run["id"])
    box = sandbox_of(run["id"])
    assert (row.runner_host, box.host) == ("b", "b")
    assert on_engine(b.client, box.name) and not on_engine(engine(), box.name)

    # A's agent, now: a tick (stops, deadlines) and a whole reconcile. No container of
    # A's engine carries the run, and it is not A's to judge.
    asyncio.run(Agent().tick())
    call_command("runner_agent", once=True)
    row.refresh_from_db()
    box.refresh_from_db()
    assert (row.state, box.state, box.stop_signalled_at) == ("running", "running", None)

    done = agent.wait(run)
    assert done["state"] == "succeeded", done
    assert agent.output(run) == ["started", "key=***", "done"]
    # Its /workspace went up to the web host, which read its changes and artifacts
    # there, and withheld the file holding the secret's value.
    assert "made-on-b.txt" in done["changes"]["added"], done["changes"]
    assert "leaked.txt" not in done["changes"]["added"]
    assert [w["path"] for w in done["changes"]["withheld"]] == ["leaked.txt"]
    assert [a["path"] for a in done["artifacts"]] == ["dist/a.txt"]
    kept = agent.get(f"/runs/{run['id']}/artifacts/dist/a.txt")
    assert kept.status_code == 200 and b"".join(kept) == b"art\n"
    assert Run.objects.get(public_id=run["id"]).secrets_sealed.startswith("host:b:")
    assert not (engine_b.keys_dir() / keys.SECRETS.file).exists()
    # Its setup filled a dependency cache on b: b's, and A's eviction leaves it alone.
    cache = DepCache.objects.get(workspace__slug="shop")
    assert cache.host == "b"
    assert caches.evict(max_bytes=0) == []
    assert DepCache.objects.filter(pk=cache.pk).exists()
    assert b.client.volumes.get(cache.volume)
    holds_nothing_of_the_web_hosts(b)
    # Beat's eviction, on the web queue, asks each host's worker for its own: B's (a
    # limit of 0 there) evicts it from its engine.
    assert broker.send(evict_caches, ())
    wait_for(
        lambda: not DepCache.objects.filter(pk=cache.pk).exists(),
        30,
        what="b's worker to evict b's cache",
    )
    assert cache.volume not in {v.name for v in b.client.volumes.list()}


def test_killing_bs_agent_mid_run_loses_no_line_and_repeats_none(b, agent):
    """B's follower sends the run's log to the web host (logs.shipped); after a restart
    it resumes from what the web host holds, while the engine kept the rest."""
    run = agent.run("for i in $(seq 1 30); do echo line $i; sleep 0.1; done")
    assert wait_for_output(agent, run, "line 3")
    b.agent.kill()
    try:
        # The run goes on writing while no agent of B listens: engine B keeps it.
        name = Run.objects.get(public_id=run["id"]).container_name
        container = b.client.containers.get(name)
        kept = lambda: b"line 12\n" in engine_output(container)  # noqa: E731
        wait_for(kept, 30, what="line 12 in engine B's log")
    finally:
        b.agent.start()
    done = agent.wait(run, timeout=120)
    assert done["state"] == "succeeded", done
    assert agent.output(done) == [f"line {i}" for i in range(1, 31)]
    assert Run.objects.get(public_id=run["id"]).runner_host == "b"


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
def test_a_session_on_b_survives_as_agent_restart_and_keeps_its_files(
    b, run_stack, client, cast, shop, runtime, berth_server
):
    grant_api_key(client, cast)
    _, secret = cast.token(
        cast.carol, ["workspace:read", "workspace:write", "run"], secret_names=["API_KEY"]
    )
    agent = SessionAgent(client, secret)
    session = agent.ready(runtime=runtime)
    assert lines(agent.exec(session, "echo kept > note.txt && echo written")) == ["written"]
    # Its changes: read by b's agent through the channel into a store on the web host.
    changed = agent.get(f"/sessions/{session['id']}/changes")
    assert changed.status_code == 200, changed.content
    assert changed.json()["changes"]["added"] == ["note.txt"]
    # A write on the branch reaches b's copy (synced); the session's file commits.
    agent.write("synced.txt", "from the branch\n")
    assert lines(agent.exec(session, "cat synced.txt")) == ["from the branch"]
    done = agent.post(
        f"/sessions/{session['id']}/commit", {"message": "From b", "paths": ["note.txt"]}
    )
    assert done.status_code == 201, done.content
    assert agent.branch_file("note.txt") == "kept\n"
    # A terminal on b: what it shows is kept on the web host, its transcript.
    term = agent.post(f"/sessions/{session['id']}/terminals").json()
    with open_socket(berth_server, term["id"], secret) as ws:
        screen = Screen(ws)
        screen.read_prompt()
        screen.type("echo on-b-$((20+22))\r")
        screen.read_until("on-b-42")
    wait_for(
        lambda: "on-b-42" in agent.get(f"/terminals/{term['id']}/transcript").content.decode(),
        30,
        what="the web host's transcript to hold on-b-42",
    )
    # A granted secret reaches b's exec, sealed for b, and its output is masked there.
    granted = agent.exec(session, 'echo "key=$API_KEY"', secrets=["API_KEY"])
    assert lines(granted) == ["key=***"]
    stored = Session.objects.select_related("run").get(public_id=session["id"])
    assert stored.runner_host == "b" and stored.run is not None
    assert stored.run.runtime == runtime
    box = sandbox_of(stored.run.public_id, SandboxKind.SESSION)
    assert box.host == "b" and on_engine(b.client, box.name)

    # A's agent dies and comes back: its start reconciles, and b's session is not its.
    run_stack.agent.kill()
    run_stack.agent.start()
    assert lines(agent.exec(session, "cat note.txt")) == ["kept"]
    assert agent.session(session)["state"] == "ready"
    box.refresh_from_db()
    assert box.state == "running" and box.stop_reason == ""

    # Deleted at a door (daphne, on A): its volume is on b's engine, which b's agent
    # alone touches; told by the door, it removes it.
    stored.refresh_from_db()
    assert agent.post(f"/sessions/{session['id']}/stop").status_code == 202
    agent.wait_state(session, "stopped", timeout=60)
    deleted = agent.client.delete(f"/api/v1/sessions/{session['id']}", **agent.headers)
    assert deleted.status_code in (200, 202), deleted.content
    volume = stored.volume
    wait_for(
        lambda: not any(v.name == volume for v in b.client.volumes.list()),
        30,
        what="b's agent to remove the deleted session's volume",
    )
    holds_nothing_of_the_web_hosts(b)


def test_hosts_lists_both_with_fresh_heartbeats_and_drain_moves_new_work(b, agent, cast):
    wait_for(  # this host's row is the cast's: its agent beats over it within a second
        lambda: Host.objects.filter(heartbeat_at__isnull=False).count() == 2,
        30,
        what="both hosts' heartbeats",
    )
    out = io.StringIO()
    call_command("hosts", stdout=out)
    table = out.getvalue().splitlines()[1:3]  # then each host's gateway, said below it
    rows = {line.split()[0]: line.split() for line in table}
    assert rows["local"][1] == "draining" and rows["b"][1] == "ready"
    for name in ("local", "b"):
        assert rows[name][3] == "ago" and "(stale)" not in " ".join(rows[name]), rows[name]
        assert rows[name][5] == "runc,gvisor"

    # Undrained, drained the other way: the next run goes to this host.
    cast.host.undrain()
    Host.objects.get(name="b").drain()
    run = agent.wait(agent.run("echo here"))
    assert run["state"] == "succeeded"
    assert Run.objects.get(public_id=run["id"]).runner_host == "local"
    assert Host.objects.get(name="b").state == HostState.DRAINING


def test_a_preview_on_b_is_served_by_bs_gateway_and_as_gateway_never_enters_it(
    b, client, cast, berth_server
):
    probe = workspace_actions.create_workspace(cast.team_a, Actor(cast.carol), "Probe", "probe")
    write(probe, cast.carol, {"probe_app.py": PROBE_APP, "workspace.toml": probe_toml()})
    _, secret = cast.token(cast.carol, ["workspace:read", "workspace:write", "preview"])
    previews = PreviewAgent(client, secret, "probe")
    ready = previews.wait(previews.start(), {"ready"} | ENDED)
    assert ready["state"] == "ready", ready
    preview = Preview.objects.select_related("run").get(public_id=ready["id"])
    assert preview.process_host == "b" and preview.run is not None
    assert sandbox_of(preview.run.public_id, SandboxKind.SERVICE).host == "b"

    # B's gateway serves it (the cookie key is the instance's: A's web issued it).
    at_b = Browser(SimpleNamespace(gateway_port=b.gateway_port))
    at_b.open(previews.link(ready))
    r = at_b.get(ready["url"])
    assert r.status_code == 200 and b"probe app" in r.content

    # A's gateway is given the same target and refuses to enter b's namespace, though
    # on this machine its pid would lead right in: said in its log, never served.
    a_log = berth_server.log_path.with_name("preview-gateway.log")
    refused = "refused to enter the namespace of pid"
    before = a_log.read_text(errors="replace").count(refused)
    at_a = Browser(berth_server)
    at_a.open(previews.link(ready))
    r = at_a.get(ready["url"], headers={"Accept": "application/json"})
    assert b"probe app" not in r.content
    assert (r.status_code, r.json()["error"]["code"]) == (502, "preview_on_another_host")
    assert a_log.read_text(errors="replace").count(refused) > before
    assert refused not in b.gateway_log.read_text(errors="replace")
    # A's agent never probed it either: its watcher keeps to its own host's previews
    # (b's agent made it ready, alone).
    a_agent_log = berth_server.log_path.with_name("runner-agent.log")
    assert refused not in a_agent_log.read_text(errors="replace")
    assert "refused" not in b.agent_log.read_text(errors="replace")
    previews.post(ready, "stop")
