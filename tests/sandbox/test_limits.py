"""Limits that cannot vanish (issue 22, item 4): whatever workspace.toml or the operator's
settings say, every sandbox — a run, a preview, a release build, a release — gets a
CPU, memory and process limit within Berth's floors and the operator's ceilings. Read
back from the container's cgroup on the host (under gVisor the sandbox sees no cgroup
files), on the real engine under both runtimes."""

import contextlib
from pathlib import Path
from typing import Any

import docker
import pytest
import requests
from django.conf import settings

from accounts.access import Actor
from deploys.models import Release
from runs.models import Run
from sandbox.docker import GVISOR_PIDS_HEADROOM
from sandbox.engine import engine
from tests.support.deploys import Requester, app, approve
from tests.support.mcp import connect
from tests.support.previews import PROBE_APP, PreviewAgent, write
from tests.support.runs import Agent, set_toml, wait_for_output
from tests.support.servers import wait_for
from workspaces import actions as workspace_actions

pytestmark = pytest.mark.docker

MB = 1024 * 1024
CGROUP = Path("/sys/fs/cgroup")


def cgroup_limits(run_id: str) -> dict[str, Any]:
    """The CPU quota (in CPUs), memory limit (bytes) and process limit of the run's
    running container, from its cgroup on the host (v1 here; v2 where the host has it).
    None means unlimited."""

    def running_pid() -> int:
        name = Run.objects.select_related("sandbox").get(public_id=run_id).container_name
        if not name:  # queued: the worker has not made its sandbox yet
            return 0
        try:
            state = engine().api.inspect_container(name)["State"]
        except docker.errors.NotFound:  # made, its container not yet
            return 0
        return int(state["Pid"]) if state["Running"] else 0

    pid = wait_for(running_pid, timeout=60, what=f"run {run_id}'s container to run")
    paths: dict[str, str] = {}
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else ["unified"]:
            paths[controller] = path.lstrip("/")
    if "cpu" in paths:
        quota = int((CGROUP / "cpu" / paths["cpu"] / "cpu.cfs_quota_us").read_text())
        period = int((CGROUP / "cpu" / paths["cpu"] / "cpu.cfs_period_us").read_text())
        memory = (CGROUP / "memory" / paths["memory"] / "memory.limit_in_bytes").read_text()
        pids = (CGROUP / "pids" / paths["pids"] / "pids.max").read_text()
    else:
        base = CGROUP / paths["unified"]
        cpu_max, period_text = (base / "cpu.max").read_text().split()
        quota, period = (-1 if cpu_max == "max" else int(cpu_max)), int(period_text)
        memory, pids = (base / "memory.max").read_text(), (base / "pids.max").read_text()
    memory_bytes = int(memory) if memory.strip().isdigit() else None
    return {
        "cpus": quota / period if quota > 0 else None,
        # v1 writes "no limit" as a huge page-aligned number
        "memory_bytes": memory_bytes if memory_bytes and memory_bytes < 1 << 60 else None,
        "pids": int(pids) if pids.strip().isdigit() else None,
    }


# (what workspace.toml says, the operator's pids and nofile settings) → what applies
Case = tuple[str, dict[str, int], dict[str, Any], int]
TINY: Case = (
    "cpus = 1e-10\nmemory_mb = 16\n",
    {"RUN_PIDS_LIMIT": -1, "RUN_NOFILE": 0},
    {"cpus": 0.1, "memory_bytes": 64 * MB, "pids": 64},
    256,
)
NORMAL: Case = (
    "cpus = 1.5\nmemory_mb = 256\n",
    {},
    {"cpus": 1.5, "memory_bytes": 256 * MB, "pids": 256},
    4096,
)


@pytest.fixture
def shop(cast):
    workspace = workspace_actions.create_workspace(
        cast.team_a, Actor(cast.alice), "Shop", "shop", "python-http"
    )
    write(workspace, cast.alice, {"probe_app.py": PROBE_APP, "app.py": app("release one")})
    return workspace


@pytest.fixture
def agent(client, cast, shop, run_stack):
    _, secret = cast.token(cast.alice, ["workspace:read", "workspace:write", "run"])
    return Agent(client, secret)


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
@pytest.mark.parametrize("case", [TINY, NORMAL], ids=["tiny", "normal"])
def test_a_runs_limits_read_back_from_its_cgroup(agent, shop, cast, settings, runtime, case):
    toml, operator, applied, nofile = case
    for name, value in operator.items():
        setattr(settings, name, value)
    set_toml(shop, cast, f'[sandbox]\nruntime = "{runtime}"\n{toml}')
    run = agent.run("ulimit -n; echo started; exec sleep 300")
    assert wait_for_output(agent, run, "started", timeout=120)
    container = Run.objects.get(public_id=run["id"]).container_name
    # Under gVisor the engine's pids limit also holds gVisor's own threads.
    headroom = GVISOR_PIDS_HEADROOM if runtime == "gvisor" else 0
    assert cgroup_limits(run["id"]) == {**applied, "pids": applied["pids"] + headroom}
    host = engine().api.inspect_container(container)["HostConfig"]
    assert host["NanoCpus"] == round(applied["cpus"] * 1e9)
    # The sandbox's own view of its open-file limit.
    assert wait_for_output(agent, run, str(nofile))
    current = agent.get(f"/runs/{run['id']}").json()
    assert current["limits"]["cpus"] == applied["cpus"]
    assert current["isolation"]["pids_limit"] == applied["pids"] + headroom
    if case is TINY:
        assert set(current["warnings"]) >= {
            "workspace.toml asks for [sandbox].cpus = 1e-10; this server allows at least "
            "0.1, so 0.1 applies.",
            "workspace.toml asks for [sandbox].memory_mb = 16; this server allows at least "
            "64, so 64 applies.",
            "the setting RUN_PIDS_LIMIT is -1; this server allows at least 64, so 64 applies.",
            "the setting RUN_NOFILE is 0; this server allows at least 256, so 256 applies.",
        }
    else:
        assert not current["warnings"]
    agent.client.post(f"/api/v1/runs/{run['id']}/cancel", **agent.headers)
    assert agent.wait(run, timeout=60)["state"] == "cancelled"


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
@pytest.mark.parametrize(
    ("cpus", "applied"), [("1e-10", 0.1), ("0.5", 0.5)], ids=["tiny", "normal"]
)
def test_a_preview_a_release_build_and_a_release_hold_cpus_within_bounds(
    client, cast, shop, signed_in, run_stack, berth_server, runtime, cpus, applied
):
    write(
        shop,
        cast.alice,
        {
            "workspace.toml": (
                f'[sandbox]\nruntime = "{runtime}"\ncpus = {cpus}\nmemory_mb = 256\n\n'
                '[preview]\ncommand = "python3 probe_app.py"\nport = 8000\n\n'
                # The build waits for the test to have read its cgroup.
                '[deploy]\nbuild = "while [ ! -e /tmp/go ]; do sleep 0.2; done"\n'
                'command = "python3 app.py"\nport = 8000\nhealth_path = "/"\n'
            )
        },
    )
    _, secret = cast.token(cast.alice, ["workspace:read", "preview", "run", "deploy:request"])
    headroom = GVISOR_PIDS_HEADROOM if runtime == "gvisor" else 0
    pids = settings.RUN_PIDS_LIMIT + headroom
    expected = {"cpus": applied, "memory_bytes": 256 * MB, "pids": pids}

    # The test stack gives a process PREVIEW_START_DEADLINE_S = 6 s to answer; at the
    # 0.1-CPU floor under gVisor on a loaded host, Python alone may take longer. What
    # this test holds is each container's cgroup, read while its process starts; going
    # live is held at the normal value (and by tests/deploys/test_deploys.py).
    must_come_up = cpus != "1e-10"
    previews = PreviewAgent(client, secret, "shop")
    preview = previews.start()
    process = wait_for(lambda: previews.get(preview)["run"], timeout=60, what="its process")
    assert cgroup_limits(process) == expected
    preview = previews.wait(preview, {"ready", "failed", "stopped", "crashed"}, timeout=180)
    assert any("[sandbox].cpus = 1e-10" in w for w in preview["warnings"]) is (cpus == "1e-10")
    if must_come_up:
        assert preview["state"] == "ready", (preview["reason"], preview["message"])
    else:
        assert preview["state"] in ("ready", "failed"), preview["state"]
    if preview["state"] == "ready":
        previews.post(preview, "stop")

    requester = Requester(client, secret)
    deploy = requester.ask("limits")
    approve(signed_in, cast.bob, deploy)
    build_id = wait_for(
        lambda: requester.get(deploy)["build_run"], timeout=60, what="the build to be queued"
    )
    build = Run.objects.get(public_id=build_id)
    assert cgroup_limits(build.public_id) == expected
    assert any("[sandbox].cpus = 1e-10" in w for w in build.warnings) is (cpus == "1e-10")
    let_go(build)
    release = wait_for(
        lambda: (
            Release.objects.filter(request__public_id=deploy["id"], process__run__isnull=False)
            .select_related("process__run")
            .first()
        ),
        timeout=300,
        what="the release's process",
    )
    assert cgroup_limits(release.process.run.public_id) == expected
    done = requester.wait(deploy, timeout=300)
    if must_come_up:
        assert done["state"] == "live", (done["reason"], done["message"])
    else:
        assert (done["state"], done["reason"]) in (
            ("live", None),
            ("failed", "not_listening"),
            ("failed", "health_failed"),
        ), (done["state"], done["reason"], done["message"])


def let_go(build: Run) -> None:
    """The build's hold file made, by an exec made again until the build moves on. The
    exec is detached: attached, its output stream once never closed under runsc (the
    test sat in `exec_run` until its 300 s timeout), so what is waited on is the build
    ending, the thing this test needs."""

    def moved_on() -> bool:
        build.refresh_from_db()
        if not build.is_active:
            return True
        # Not named yet, gone, or the engine slow to answer: the next look tries again.
        with contextlib.suppress(docker.errors.DockerException, requests.RequestException):
            engine().containers.get(build.container_name).exec_run(
                ["touch", "/tmp/go"], user="1000:1000", detach=True
            )
        return False

    wait_for(moved_on, timeout=120, interval=2, what="the build to see /tmp/go")


def test_request_values_outside_the_bounds_are_refused_naming_the_bound(agent):
    for timeout_s, code, bound in (
        (0, "below_minimum", {"minimum": 1}),
        (10**6, "above_maximum", {"maximum": 3600}),
    ):
        r = agent.client.post(
            "/api/v1/workspaces/shop/runs",
            {"command": "true", "timeout_s": timeout_s},
            content_type="application/json",
            **agent.headers,
        )
        assert r.status_code == 422, r.content
        error = r.json()["error"]
        assert error["code"] == code and error["details"] == {"field": "timeout_s", **bound}
    assert not Run.objects.exists()


def test_the_mcp_door_refuses_the_same_bounds(berth_server, cast, shop):
    _, secret = cast.token(cast.alice, ["workspace:read", "run"])

    async def body(agent) -> dict:
        return await agent.error("run_command", workspace="shop", command="true", timeout_s=0)

    error = connect(berth_server, secret, body)
    assert error["code"] == "below_minimum" and error["details"]["minimum"] == 1
    assert not Run.objects.exists()
