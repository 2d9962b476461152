"""A runner agent acts on its own host's work alone (docs/hosts.md): another host's
sandboxes are neither signalled nor marked removed, its runs never ended lost, however
they look from here. Host b here is rows alone (its containers would be on another
engine); each check has a twin on this host that the same agent call does act on, so
"left alone" is never "not looked at yet"."""

import asyncio
import dataclasses
import io
import subprocess
import sys
from datetime import timedelta

import pytest
from django.conf import settings
from django.core.management import call_command
from django.utils import timezone

from accounts.access import Actor
from agent.loop import Agent
from core.ids import new_id
from runs.models import OWNER, Run, RunState
from sandbox import backend, diskwatch, netns
from sandbox.engine import engine, instance_label, resource_name
from sandbox.hosts import Host
from sandbox.models import Sandbox, SandboxKind, SandboxState
from tests.support.servers import subprocess_env, wait_for
from workspaces import actions as workspace_actions

pytestmark = pytest.mark.docker


def running_run(workspace, host: str) -> tuple[Run, Sandbox]:
    """A run its host's agent started a minute ago, whose container this engine lacks."""
    long_ago = timezone.now() - timedelta(minutes=1)
    run = Run.objects.create(
        workspace=workspace,
        ref="main",
        commit="0" * 40,
        command="sleep 600",
        image=settings.SANDBOX_IMAGE,
        state=RunState.RUNNING,
        runner_host=host,
        admitted_at=long_ago,
        started_at=long_ago,
        process_started_at=long_ago,
    )
    sandbox = Sandbox.objects.create(
        name=Sandbox.engine_name(new_id()),
        host=host,
        kind=SandboxKind.RUN,
        owner_kind=OWNER,
        owner_id=run.public_id,
        state=SandboxState.RUNNING,
        started_at=long_ago,
    )
    return run, sandbox


def test_an_agent_signals_and_ends_its_own_hosts_work_and_leaves_another_hosts_alone(
    transactional_db, cast
):
    Host.objects.create(name="b", runtimes={"runc": []}, slots=4)
    shop = workspace_actions.create_workspace(
        cast.team_a, Actor(cast.carol), "Shop", "shop", "python-http"
    )
    (mine, my_box), (theirs, their_box) = running_run(shop, "local"), running_run(shop, "b")
    for box in (my_box, their_box):
        box.request_stop("cancelled_by_user", "carol")

    # A tick: a stop asked for is signalled by the sandbox's own host's agent alone (b's
    # agent would find it marked signalled and skip the SIGTERM).
    asyncio.run(Agent().tick())
    my_box.refresh_from_db()
    their_box.refresh_from_db()
    assert my_box.stop_signalled_at is not None
    assert their_box.stop_signalled_at is None

    # A reconcile: no container here carries either run; only this host's is lost.
    call_command("runner_agent", once=True)
    for row in (mine, theirs, my_box, their_box):
        row.refresh_from_db()
    assert (mine.state, mine.reason) == ("lost", "worker_lost")
    assert my_box.state == SandboxState.REMOVED
    assert theirs.state == RunState.RUNNING and theirs.reason == ""
    assert their_box.state == SandboxState.RUNNING


def test_a_runner_agent_of_a_host_berth_does_not_know_refuses_to_start(transactional_db, cast):
    done = subprocess.run(
        [sys.executable, "manage.py", "runner_agent"],
        env={**subprocess_env(), "BERTH_SANDBOX_HOST": "nowhere"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "named 'nowhere'" in done.stderr and "manage.py hosts add nowhere" in done.stderr
    assert not Host.objects.filter(name="nowhere").exists()


def test_the_agent_beats_with_its_engines_facts_and_the_list_shows_it_fresh(run_stack, cast):
    Host.objects.filter(name="local").update(heartbeat_at=None, engine_id="", images=[])
    host = Host.objects.get(name="local")
    wait_for(
        lambda: Host.objects.filter(name="local", heartbeat_at__isnull=False).exists(),
        15,
        what="the runner agent's heartbeat",
    )
    host.refresh_from_db()
    info = engine().info()
    assert host.engine_id == info["ID"] and host.engine_version == engine().version()["Version"]
    assert host.runtimes["runsc"] == info["Runtimes"]["runsc"]["runtimeArgs"]
    assert host.has_gvisor  # make setup registers runsc with --oci-seccomp
    assert host.memory_bytes == info["MemTotal"] and host.slots == settings.RUNNER_SLOTS
    sandbox_image = engine().images.get(settings.SANDBOX_IMAGE).id
    assert sandbox_image in host.images
    out = io.StringIO()
    call_command("hosts", stdout=out)
    row = next(line.split() for line in out.getvalue().splitlines() if line.startswith("local"))
    # local ready 2s ago 20.10.24 runc,gvisor <sandboxes> <slots>
    assert row[1] == "ready" and row[2].endswith("s") and row[3] == "ago"
    assert row[4] == host.engine_version and row[5] == "runc,gvisor"
    assert row[7] == str(settings.RUNNER_SLOTS)


def test_another_hosts_namespace_is_refused_and_counted_though_entering_it_would_work():
    """Both hosts of the tests share one kernel: the pid and inode of a container here,
    labelled as b's, would lead right into it. The host check refuses first."""
    container = engine().containers.run(
        settings.SANDBOX_IMAGE,
        ["python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"],
        name=resource_name("test", new_id()),
        labels=instance_label(),
        network_mode="none",
        detach=True,
    )
    try:
        container.reload()
        ns = netns.Namespace.of_pid(container.attrs["State"]["Pid"])
        assert ns.host == settings.SANDBOX_HOST
        wait_for(lambda: 8000 in netns.listening_ports(ns), 30, what="the server to listen")
        netns.socket_in(ns).close()  # this host's: entered

        theirs = dataclasses.replace(ns, host="b")
        before = netns.refusals()
        with pytest.raises(netns.OtherHost, match="on host 'b'"):
            netns.socket_in(theirs)
        with pytest.raises(netns.OtherHost):
            netns.listening_ports(theirs)
        with pytest.raises(netns.OtherHost):
            asyncio.run(netns.connect(theirs, 8000))
        assert netns.refusals() == before + 3
    finally:
        container.remove(force=True)


def test_cpu_and_disk_are_counted_for_this_hosts_sandboxes_alone(run_stack, cast):
    """Two containers on this engine, each using CPU: one row says it is this host's,
    the other b's (as if b's engine had a container of that name: here, the same
    kernel would let this agent read it). Only this host's is counted or watched. The
    stack's own agent is stopped meanwhile: its reconcile would take these containers,
    which no real run made, for strays (CI at 28980ab)."""
    run_stack.agent.kill()
    containers = []
    try:
        Host.objects.create(name="b", runtimes={"runc": []}, slots=4)
        shop = workspace_actions.create_workspace(
            cast.team_a, Actor(cast.carol), "Shop", "shop", "python-http"
        )
        boxes = {"local": running_run(shop, "local")[1], "b": running_run(shop, "b")[1]}
        # Half a second of CPU, however loaded the machine (a wall-clock loop got less).
        burn = "import time\nwhile time.process_time() < 0.5: pass\ntime.sleep(600)"
        for box in boxes.values():
            containers.append(
                engine().containers.run(
                    settings.SANDBOX_IMAGE,
                    ["python3", "-c", burn],
                    name=box.name,
                    labels=instance_label(),
                    network_mode="none",
                    detach=True,
                )
            )
        agent = Agent()

        def counted() -> Sandbox:
            asyncio.run(agent.sample_cpu())
            return Sandbox.objects.get(pk=boxes["local"].pk)

        wait_for(counted, 30, what="this host's CPU counted", until=lambda s: s.cpu_seconds >= 0.4)
        # b's container used as much (its own agent counts it), and a sample after that
        # still leaves its row alone.
        wait_for(
            lambda: backend.cpu_seconds(boxes["b"].name) or 0,
            30,
            what="b's container to use its CPU",
            until=lambda used: used >= 0.4,
        )
        asyncio.run(agent.sample_cpu())
        assert Sandbox.objects.get(pk=boxes["b"].pk).cpu_seconds == 0

        assert set(diskwatch._running()) == {boxes["local"]}
    finally:
        for container in containers:
            container.remove(force=True)
        run_stack.agent.start()
