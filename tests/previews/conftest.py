"""The previews' fixtures: carol's probe workspace (its app: tests/support/apps/probe_app.py)
under runc or, with `@both_runtimes`, gVisor too; her agent; its ready preview; and the
gateway in this process for its edge-by-edge tests."""

from collections.abc import Iterator

import pytest

from accounts.access import Actor
from previews.gateway import Gateway
from tests.support.gateway import App, Web, gateway, release, serving
from tests.support.previews import ENDED, PROBE_APP, PreviewAgent, probe_toml, write
from workspaces import actions as workspace_actions


@pytest.fixture
def runtime(request) -> str:
    """runc unless a test asks for both runtimes (`@both_runtimes`)."""
    return getattr(request, "param", "runc")


@pytest.fixture
def probe(cast, runtime):
    workspace = workspace_actions.create_workspace(cast.team_a, Actor(cast.carol), "Probe", "probe")
    write(
        workspace,
        cast.carol,
        {"probe_app.py": PROBE_APP, "workspace.toml": probe_toml(runtime=runtime)},
    )
    return workspace


@pytest.fixture
def agent(client, cast, probe, run_stack, berth_server) -> PreviewAgent:
    _, secret = cast.token(cast.carol, ["workspace:read", "workspace:write", "preview"])
    return PreviewAgent(client, secret, "probe")


@pytest.fixture
def ready(agent) -> Iterator[dict]:
    preview = agent.wait(agent.start(), {"ready"} | ENDED)
    assert preview["state"] == "ready", preview
    yield preview
    agent.post(preview, "stop")


@pytest.fixture
def gw() -> Iterator[Gateway]:
    release.clear()
    with serving(App) as app_port, serving(Web) as web_port, gateway(app_port, web_port) as g:
        yield g
    release.set()
