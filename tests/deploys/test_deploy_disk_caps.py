"""A release build's writable layer has the same disk and inode caps as a run's volumes
(issue 22, item 14), through the real deploy flow: an agent asks, bob approves, the
build runs under runc or gVisor, and the deploy fails saying why.
"""

import docker
import pytest

from accounts.access import Actor
from deploys.models import DeployRequest, Release
from sandbox.engine import engine
from tests.support.api import bearer
from tests.support.deploys import app, approve
from tests.support.previews import write
from workspaces import actions as workspace_actions

pytestmark = pytest.mark.docker


def toml(runtime: str, build: str) -> str:
    return (
        f'[sandbox]\nruntime = "{runtime}"\ndisk_mb = 20\n\n'
        f'[deploy]\nbuild = "{build}"\ncommand = "python3 app.py"\nport = 8000\n'
        'health_path = "/"\n'
    )


@pytest.fixture
def shop(cast):
    return workspace_actions.create_workspace(
        cast.team_a, Actor(cast.alice), "Shop", "shop", "python-http"
    )


# 40 MB in 5 MB files (no single file passes the fsize limit) in a few tens of ms, then
# an exit: usually before the agent's first count, so the layer's count just before it
# would become the image is what stops it.
BLOBS = """for i in range(8):
    with open(f"blob{i}", "wb") as f:
        f.write(bytes(5_000_000))
"""


def failed_build(agent, signed_in, cast, shop, build: str, runtime: str) -> tuple[dict, str]:
    write(
        shop,
        cast.alice,
        {"app.py": app("never served"), "blobs.py": BLOBS, "workspace.toml": toml(runtime, build)},
    )
    deploy = agent.ask("too big")
    approve(signed_in, cast.bob, deploy)
    done = agent.wait(deploy)
    assert (done["state"], done["reason"]) == ("failed", "build_failed"), done
    row = DeployRequest.objects.get(public_id=deploy["id"])
    build_run = row.build_run
    assert build_run is not None and build_run.state == "failed"
    # No image was made of what it wrote.
    with pytest.raises(docker.errors.ImageNotFound):
        engine().images.get(Release.objects.get(request=row).image)
    # The build's log says what was counted.
    _, secret = cast.token(cast.carol, ["workspace:read", "run"])
    r = agent.client.get(
        f"/api/v1/runs/{build_run.public_id}/logs?after=0&limit=5000", **bearer(secret)
    )
    assert r.status_code == 200, r.content
    assert any(
        e["stream"] == "system" and "in its writable layer" in e["text"]
        for e in r.json()["entries"]
    )
    return done, build_run.reason


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
def test_a_build_that_writes_past_disk_mb_fails_the_deploy_typed(
    agent, signed_in, cast, shop, runtime
):
    done, reason = failed_build(agent, signed_in, cast, shop, "python3 blobs.py", runtime)
    assert reason == "disk_quota_exceeded"
    assert "disk_quota_exceeded" in done["message"]
    assert "raise [sandbox].disk_mb" in done["message"]


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
def test_a_build_that_makes_too_many_files_fails_the_deploy_typed(
    agent, signed_in, cast, shop, settings, runtime
):
    settings.SANDBOX_MAX_INODES = 3_000
    # Still running when counted: stopped mid-build, not only at its end.
    done, reason = failed_build(
        agent,
        signed_in,
        cast,
        shop,
        "mkdir many && cd many && seq 1 6000 | xargs touch && sleep 60",
        runtime,
    )
    assert reason == "inode_quota_exceeded"
    assert "inode_quota_exceeded" in done["message"]
    assert "SANDBOX_MAX_INODES" in done["message"]
    build = DeployRequest.objects.get(public_id=done["id"]).build_run
    assert build is not None and build.limits["inodes"] == 3_000
    t = build.finished_at - build.process_started_at if build.process_started_at else None
    assert t is None or t.total_seconds() < 45  # not left to sleep out its minute
