"""A preview or release that never answers says why, at once (issue 22, item 12): an
app listening on another port than workspace.toml names fails typed
`listening_on_other_port` about 3 s after it starts, naming the ports and the line to
change; an app that exits fails `process_exited` with its code and last lines of output.
Through the API and MCP; the port detection under both runtimes."""

import datetime

import pytest

from accounts.access import Actor
from tests.support.deploys import TOML, Requester, app, approve
from tests.support.mcp import connect
from tests.support.previews import PROBE_APP, PreviewAgent, probe_toml, write
from tests.support.runs import approve_contract
from workspaces import actions as workspace_actions

pytestmark = pytest.mark.docker

ENDED = {"failed", "stopped", "crashed"}


@pytest.fixture
def probe(cast):
    workspace = workspace_actions.create_workspace(cast.team_a, Actor(cast.carol), "Probe", "probe")
    write(workspace, cast.carol, {"probe_app.py": PROBE_APP})
    return workspace


@pytest.fixture
def agent(client, cast, probe, run_stack, berth_server) -> PreviewAgent:
    _, secret = cast.token(cast.carol, ["workspace:read", "workspace:write", "preview"])
    return PreviewAgent(client, secret, "probe")


def seconds_after_start(preview: dict) -> float:
    timings = preview["timings"]
    return (
        datetime.datetime.fromisoformat(timings["ended_at"])
        - datetime.datetime.fromisoformat(timings["process_started_at"])
    ).total_seconds()


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
def test_an_app_on_another_port_fails_at_once_naming_the_port_and_the_line(
    agent, probe, cast, runtime
):
    write(
        probe,
        cast.carol,
        {"workspace.toml": probe_toml("PORT=8001 python3 probe_app.py", runtime=runtime)},
    )
    preview = agent.wait(agent.start(), ENDED)
    assert (preview["state"], preview["reason"]) == ("failed", "listening_on_other_port"), preview
    message = preview["message"]
    assert "Nothing listens on port 8000" in message and "listens on port 8001" in message
    assert (
        "Change the line `port = 8000` under [preview] in workspace.toml to "
        "`port = 8001`" in message
    )
    # After the 3 s an app gets to bind, well before the start deadline (6 s here).
    assert 3 <= seconds_after_start(preview) < 6, preview["timings"]
    assert preview["runtime"] == runtime


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
def test_an_extra_port_next_to_the_right_one_is_fine(agent, probe, cast, runtime):
    write(
        probe,
        cast.carol,
        {"workspace.toml": probe_toml("python3 probe_app.py second-port", runtime=runtime)},
    )
    preview = agent.wait(agent.start(), {"ready"} | ENDED)
    assert preview["state"] == "ready", preview
    agent.post(preview, "stop")


def test_berths_own_egress_listener_is_not_taken_for_the_app(agent, probe, cast):
    cast.team_a.egress_ceiling = ["files.test:1"]
    cast.team_a.save()
    write(
        probe,
        cast.alice,
        {
            "workspace.toml": probe_toml("python3 probe_app.py silent")
            + '\n[network]\negress = ["files.test:1"]\n'
        },
    )
    approve_contract(probe, cast, probe.default_branch)  # a write approves nothing
    preview = agent.wait(agent.start(), ENDED)
    assert preview["network"]["mode"] == "proxy"
    # Only the proxy listens (127.0.0.1:3128): the app listens nowhere, as it says.
    assert (preview["state"], preview["reason"]) == ("failed", "not_listening"), preview


def test_an_app_that_exits_says_so_with_its_code_and_last_lines_at_once(agent, probe, cast):
    write(probe, cast.carol, {"workspace.toml": probe_toml("python3 probe_app.py exit")})
    preview = agent.wait(agent.start(), ENDED)
    assert (preview["state"], preview["reason"], preview["exit_code"]) == (
        "failed",
        "process_exited",
        3,
    ), preview
    assert "exited with code 3 before it answered on port 8000" in preview["message"]
    assert "probe app: giving up at once" in preview["message"]
    assert seconds_after_start(preview) < 3, preview["timings"]


def test_start_preview_through_mcp_says_the_port_at_once(berth_server, run_stack, probe, cast):
    write(probe, cast.carol, {"workspace.toml": probe_toml("PORT=8001 python3 probe_app.py")})
    _, secret = cast.token(cast.carol, ["workspace:read", "preview"])

    async def body(agent) -> dict:
        return await agent("start_preview", workspace="probe", wait_seconds=60)

    preview = connect(berth_server, secret, body)
    assert (preview["state"], preview["reason"]) == ("failed", "listening_on_other_port")
    assert "`port = 8001`" in preview["message"]
    assert any("probe app listening on 127.0.0.1:8001" in line for line in preview["log_tail"])

    write(probe, cast.carol, {"workspace.toml": probe_toml("python3 probe_app.py exit")})
    preview = connect(berth_server, secret, body)
    assert (preview["state"], preview["reason"], preview["exit_code"]) == (
        "failed",
        "process_exited",
        3,
    )
    assert "giving up at once" in preview["message"]


def test_a_release_on_another_port_fails_its_deploy_with_the_same_reason(
    client, cast, run_stack, berth_server, signed_in
):
    shop = workspace_actions.create_workspace(
        cast.team_a, Actor(cast.alice), "Shop", "shop", "python-http"
    )
    write(
        shop,
        cast.alice,
        {
            "app.py": app("on the wrong port").replace(
                '("127.0.0.1", 8000)', '("127.0.0.1", 8001)'
            ),
            "workspace.toml": TOML,
        },
    )
    _, secret = cast.token(cast.alice, ["workspace:read", "deploy:request"])
    requester = Requester(client, secret)
    deploy = requester.ask("wrong port")
    approve(signed_in, cast.bob, deploy)
    failed = requester.wait(deploy)
    assert (failed["state"], failed["reason"]) == ("failed", "listening_on_other_port"), failed
    assert (
        "Change the line `port = 8000` under [deploy] in workspace.toml to "
        "`port = 8001`" in failed["message"]
    )
    assert "ask for a deploy again" in failed["message"] and "still serves" in failed["message"]
