"""A deleted owner leaves no sandbox behind (docs/security.md 37), told through the API
with a real Celery worker, runner agent and Docker engine, under runc and gVisor.

The honest way to a sandbox that stays `created`: a run with a `[setup]` step makes
its main container at once and starts it only once setup has succeeded; a workspace
deleted while setup runs leaves that container created, its run gone, and the /deps
volume it mounts in use."""

import pytest
from django.conf import settings

from accounts.access import Actor
from runs.prepare import remove_workspace_sandboxes
from sandbox.engine import engine
from sandbox.models import Sandbox, SandboxKind, SandboxState
from tests.support.runs import Agent
from tests.support.servers import wait_for
from workspaces import actions as workspace_actions
from workspaces.changes import Change
from workspaces.signals import workspace_deleting

pytestmark = pytest.mark.docker

SLOW_SETUP = """[setup]
command = "sleep 300"
cache_key = ["requirements.txt"]
"""


@pytest.fixture
def shop(cast):
    shop = workspace_actions.create_workspace(
        cast.team_a, Actor(cast.carol), "Shop", "shop", "python-http"
    )
    # By the admin, signed in: the contract she writes is approved.
    workspace_actions.commit_changes(
        shop,
        Actor(cast.alice),
        [
            Change("write", "workspace.toml", SLOW_SETUP.encode()),
            Change("write", "requirements.txt", b"requests==2.32.3\n"),
        ],
        "a setup that takes its time",
    )
    return shop


@pytest.fixture
def agent(client, cast, shop, run_stack) -> Agent:
    _, secret = cast.token(cast.carol, ["workspace:read", "run"])
    return Agent(client, secret)


@pytest.fixture
def admin(client, cast) -> Agent:
    _, secret = cast.token(cast.alice, ["workspace:read", "workspace:write"])
    return Agent(client, secret)


def setup_running_main_created(run: dict) -> list[Sandbox]:
    """Waits until the run's setup container runs and its main one is created, unstarted."""

    def reached() -> list[Sandbox] | None:
        boxes = {s.kind: s for s in Sandbox.objects.filter(owner_kind="run", owner_id=run["id"])}
        setup, main = boxes.get(SandboxKind.SETUP), boxes.get(SandboxKind.RUN)
        if setup is None or main is None or setup.state != SandboxState.RUNNING:
            return None
        found = engine().api.containers(all=True, filters={"name": main.name})
        if not found or found[0]["State"] != "created":
            return None
        return [setup, main]

    return wait_for(reached, 120, interval=0.2, what=f"run {run['id']}'s setup to run")


def leftovers(run_id: str) -> list[str]:
    """What the engine and the rows still hold of the run: containers, volumes (its
    sandboxes' and its /deps), live Sandbox rows."""
    owned = {"label": [f"berth.instance={settings.BERTH_INSTANCE}", f"berth.owner={run_id}"]}
    return (
        [c["Names"][0] for c in engine().api.containers(all=True, filters=owned)]
        + [v.name for v in engine().volumes.list(filters=owned)]
        + [
            s.name
            for s in Sandbox.objects.filter(owner_kind="run", owner_id=run_id).exclude(
                state=SandboxState.REMOVED
            )
        ]
    )


def refusals(volume: str) -> int:
    """How often the agent said the engine refused to remove `volume`."""
    log = (settings.DATA_DIR / "runner-agent.log").read_text(errors="replace")
    return sum(1 for line in log.splitlines() if f"{volume} not removed" in line)


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
def test_deleting_a_workspace_removes_its_sandboxes_a_created_one_too(agent, admin, shop, runtime):
    run = agent.run("echo never", runtime=runtime)
    setup, main = setup_running_main_created(run)
    deps = f"berth-{settings.BERTH_INSTANCE}-deps-{run['id']}"
    assert deps in [v.name for v in engine().volumes.list()]

    r = admin.client.delete("/api/v1/workspaces/shop", **admin.headers)
    assert r.status_code == 204, r.content

    # Gone before the answer: nothing waits for the agent.
    assert leftovers(run["id"]) == []
    for box in (setup, main):
        box.refresh_from_db()
        assert box.state == SandboxState.REMOVED and box.removed_at
    assert deps not in [v.name for v in engine().volumes.list()]
    assert refusals(deps) == 0


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
def test_the_agent_removes_a_sandbox_whose_owner_is_gone_and_says_so_once(
    agent, admin, shop, runtime
):
    """Leftovers of a workspace deleted before Berth removed sandboxes at deletion (as
    after the API fuzz run of issue 32): the reconcile removes the created container,
    the running one and their volumes, and the /deps volume they held is removed after
    them, not refused every RECONCILE_EVERY_S."""
    run = agent.run("echo never", runtime=runtime)
    setup, main = setup_running_main_created(run)
    deps = f"berth-{settings.BERTH_INSTANCE}-deps-{run['id']}"
    workspace_deleting.disconnect(dispatch_uid="runs.workspace")
    try:
        r = admin.client.delete("/api/v1/workspaces/shop", **admin.headers)
    finally:
        workspace_deleting.connect(remove_workspace_sandboxes, dispatch_uid="runs.workspace")
    assert r.status_code == 204, r.content
    assert engine().api.containers(all=True, filters={"name": main.name})  # left behind

    wait_for(
        lambda: leftovers(run["id"]) == [],
        60,
        interval=0.2,
        what=f"the agent to remove run {run['id']}'s sandboxes and volumes",
    )
    for box in (setup, main):
        box.refresh_from_db()
        assert box.state == SandboxState.REMOVED
    log = (settings.DATA_DIR / "runner-agent.log").read_text(errors="replace")
    assert f"sandbox {main.public_id} removed: its run {run['id']} is gone" in log
    # Its container went first: the volume it mounted was never refused, or once.
    assert refusals(deps) <= 1
