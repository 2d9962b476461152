"""The kernel surface of a sandbox (issue 22, item 10): under runc and under gVisor,
nothing in a run, its setup, a preview, a release build or a release makes a user
namespace or an io_uring, and each run records which seccomp profile the engine holds
and what enforced it. Through real runs on the real engine."""

import hashlib
import json
from pathlib import Path

import pytest

from accounts.access import Actor
from deploys.models import Release
from sandbox.engine import engine
from sandbox.hardening import PROFILES
from tests.support.api import bearer
from tests.support.deploys import Requester, app, approve
from tests.support.previews import PROBE_APP, PreviewAgent, probe_toml, write
from tests.support.runs import Agent
from tests.support.servers import wait_for
from workspaces import actions as workspace_actions

pytestmark = pytest.mark.docker

PROBE = (Path(__file__).parents[1] / "support" / "apps" / "kernel_probe.py").read_text()
ENGINE_RUNTIME = {"runc": "runc", "gvisor": "runsc"}
# What a hostile tenant tries, and what it must get: a refusal, while threads (the
# clone3 → clone fallback glibc needs) still work.
REFUSED = {
    "io_uring_setup": "EPERM",
    "unshare_user": "EPERM",
    "clone3_user": "ENOSYS",
    "thread": "ok",
    "everyday": "ok",
    "unshare_Ur": "refused",
}


def probes(entries: list[dict]) -> dict[str, dict]:
    """The probe's JSON lines from a log, by label."""
    found = {}
    for entry in entries:
        if entry["stream"] == "stdout" and entry["text"].startswith('{"probe"'):
            line = json.loads(entry["text"])
            found[line.pop("probe")] = line
    return found


def log_of(client, headers: dict, path: str) -> list[dict]:
    r = client.get(f"/api/v1/{path}/logs?after=0&limit=5000", **headers)
    assert r.status_code == 200, r.content
    return r.json()["entries"]


def probed(client, headers: dict, path: str) -> dict[str, dict]:
    """The probes of a process still running: its log may lag its output a little."""
    return wait_for(
        lambda: probes(log_of(client, headers, path)),
        timeout=30,
        what=f"the probe's line in {path}'s log",
    )


def enforced(seccomp: dict, runtime: str) -> None:
    """The run's record: Berth's profile for its runtime, the very text the engine
    holds, enforced by that runtime."""
    engine_runtime = ENGINE_RUNTIME[runtime]
    assert seccomp["profile"] == f"berth-sandbox/{engine_runtime}"
    assert seccomp["sha256"] == hashlib.sha256(PROFILES[engine_runtime].encode()).hexdigest()
    assert seccomp["enforced"] is True
    assert seccomp["enforced_by"] == (
        "runsc --oci-seccomp (inside gVisor)" if runtime == "gvisor" else "runc (host kernel)"
    )


def held_by_engine(container_name: str, runtime: str) -> bool:
    options = engine().api.inspect_container(container_name)["HostConfig"]["SecurityOpt"]
    return f"seccomp={PROFILES[ENGINE_RUNTIME[runtime]]}" in options


@pytest.fixture
def shop(cast):
    workspace = workspace_actions.create_workspace(
        cast.team_a, Actor(cast.alice), "Shop", "shop", "python-http"
    )
    write(workspace, cast.alice, {"kernel_probe.py": PROBE, "probe_app.py": PROBE_APP})
    return workspace


@pytest.fixture
def agent(client, cast, shop, run_stack):
    _, secret = cast.token(cast.alice, ["workspace:read", "workspace:write", "run", "preview"])
    return Agent(client, secret)


def runsc_enforces_seccomp() -> bool:
    return "--oci-seccomp" in (engine().info()["Runtimes"]["runsc"].get("runtimeArgs") or [])


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
def test_a_run_and_its_setup_cannot_make_a_user_namespace_or_an_io_uring(
    agent, shop, cast, runtime
):
    write(
        shop,
        cast.alice,
        {
            "workspace.toml": (
                f'[sandbox]\nruntime = "{runtime}"\n\n'
                '[setup]\ncommand = "python3 kernel_probe.py setup"\n'
                'cache_key = ["kernel_probe.py"]\n'
            )
        },
    )
    done = agent.wait(agent.run("python3 kernel_probe.py run"), timeout=180)
    assert done["state"] == "succeeded", (done, agent.output(done))
    found = probes(agent.log(done))
    assert found == {"setup": REFUSED, "run": REFUSED}
    assert done["isolation"]["runtime"] == ENGINE_RUNTIME[runtime]
    enforced(done["isolation"]["seccomp"], runtime)
    # The record names the profile; it does not carry its 13 kB.
    [option] = [o for o in done["isolation"]["security_opt"] if o.startswith("seccomp=")]
    assert option.startswith(f"seccomp=berth-sandbox/{ENGINE_RUNTIME[runtime]}@sha256:")


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
def test_previews_release_builds_and_releases_get_the_profile_too(
    client, cast, shop, agent, signed_in, berth_server, runtime
):
    write(
        shop,
        cast.alice,
        {
            "app.py": app("release one"),
            "workspace.toml": probe_toml(
                "python3 kernel_probe.py preview && python3 probe_app.py", runtime=runtime
            )
            + (
                '\n[deploy]\nbuild = "python3 kernel_probe.py build"\n'
                'command = "python3 kernel_probe.py release && python3 app.py"\nport = 8000\n'
                'health_path = "/"\n'
            ),
        },
    )
    _, secret = cast.token(cast.alice, ["workspace:read", "preview", "run", "deploy:request"])
    headers = bearer(secret)

    previews = PreviewAgent(client, secret, "shop")
    preview = previews.wait(
        previews.start(), {"ready", "failed", "stopped", "crashed"}, timeout=180
    )
    assert preview["state"] == "ready", preview
    assert probed(client, headers, f"previews/{preview['id']}") == {"preview": REFUSED}
    enforced(preview["isolation"]["seccomp"], runtime)
    previews.post(preview, "stop")

    requester = Requester(client, secret)
    deploy = requester.ask("probe the kernel")
    approve(signed_in, cast.bob, deploy)
    done = requester.wait(deploy, timeout=300)
    assert done["state"] == "live", done
    build = client.get(f"/api/v1/runs/{done['build_run']}", **headers).json()
    assert probes(log_of(client, headers, f"runs/{build['id']}")) == {"build": REFUSED}
    enforced(build["isolation"]["seccomp"], runtime)
    process = Release.objects.get(request__public_id=deploy["id"]).process
    assert probed(client, headers, f"previews/{process.public_id}") == {"release": REFUSED}
    enforced(process.run.isolation["seccomp"], runtime)
    assert held_by_engine(process.run.container_name, runtime)


def test_gvisor_runs_only_where_runsc_enforces_the_profile(agent, shop, cast):
    """Fail closed: on an engine whose runsc was registered without --oci-seccomp
    (before `scripts/host-setup docker` registered it again), a gVisor run is refused
    rather than run with a profile nothing applies."""
    write(shop, cast.alice, {"workspace.toml": '[sandbox]\nruntime = "gvisor"\n'})
    done = agent.wait(agent.run("true"))
    if runsc_enforces_seccomp():
        assert done["state"] == "succeeded", done
        assert done["isolation"]["seccomp"]["enforced"] is True
    else:
        assert (done["state"], done["reason"]) == ("error", "seccomp_unavailable"), done
        assert "scripts/host-setup docker" in done["message"]
        assert "--oci-seccomp" in done["message"]
