"""An older commit holding a symlink that climbs out of the tree (made before the doors
refused one: here straight into the store with dulwich) still runs: the link is left
out of /workspace and the run's log names it (docs/security.md 33). Under runc and
gVisor, through the API, with a real worker, runner agent and engine."""

import io
import tarfile

import pytest
from django.conf import settings
from docker.types import Mount

from accounts.access import Actor
from core.ids import new_id
from runs import prepare
from runs.outcomes import describe
from sandbox import backend
from sandbox.engine import engine, instance_label, resource_name
from tests.support.git import commit_bypassing_the_doors
from tests.support.runs import Agent
from workspaces import actions as workspace_actions

pytestmark = pytest.mark.docker

LINKS = {
    "docs/passwd": b"../../etc/passwd",  # out: the engine would refuse the whole archive
    "up": b"../shop/app.py",  # out and back in is out
    "docs/app.py": b"../app.py",  # inside
    "hostname": b"/etc/hostname",  # absolute: the engine keeps it inside
}


@pytest.fixture
def agent(client, cast, run_stack) -> Agent:
    shop = workspace_actions.create_workspace(
        cast.team_a, Actor(cast.carol), "Shop", "shop", "python-http"
    )
    commit_bypassing_the_doors(shop, LINKS)
    _, secret = cast.token(cast.carol, ["workspace:read", "run"])
    return Agent(client, secret)


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
def test_an_older_commit_with_a_link_out_runs_without_it_and_says_so(agent, runtime):
    script = "for f in docs/passwd up docs/app.py hostname; do [ -L $f ] && echo $f; done"
    done = agent.wait(agent.run(script, runtime=runtime))
    assert done["state"] == "succeeded", (done, agent.log(done))
    log = agent.log(done)
    assert [e["text"] for e in log if e["stream"] != "system"] == ["docs/app.py", "hostname"]
    [note] = [e["text"] for e in log if e["stream"] == "system" and "[source]" in e["text"]]
    assert "2 symlink(s) left out of /workspace" in note
    assert "docs/passwd, up" in note


def test_an_archive_the_engine_refuses_is_the_sources_fault_naming_the_path(db):
    """Were an entry the engine will not hold to reach it anyway, the run fails
    `source_invalid` naming the path, never `engine_unavailable`."""
    name = resource_name("links-out", new_id(6))
    engine().volumes.create(name, labels=instance_label())
    container = engine().containers.create(
        settings.SANDBOX_IMAGE,
        ["true"],
        name=name,
        labels=instance_label(),
        mounts=[Mount("/workspace", name, type="volume")],
    )
    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w") as archive:
        link = tarfile.TarInfo("docs/passwd")
        link.type, link.linkname = tarfile.SYMTYPE, "../../etc/passwd"
        archive.addfile(link)
    try:
        with pytest.raises(backend.SandboxError) as refused:
            prepare._put_source(container, "/workspace", tar.getvalue())
    finally:
        container.remove(force=True)
        engine().volumes.get(name).remove(force=True)
    assert refused.value.reason == "source_invalid"
    state, message = describe("source_invalid", **refused.value.facts)
    assert state == "failed"
    assert 'invalid symlink "/workspace/docs/passwd" -> "../../etc/passwd"' in message
