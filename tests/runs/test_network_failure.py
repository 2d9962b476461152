"""A command or [setup] step that fails on the network says so, and how to allow the
destination (issue 26, item 2): real runs in real sandboxes, through the API and MCP.
Nothing leaves the machine: a sandbox without [network] egress has no network at all,
and the proxy of one with egress refuses what is not on its list."""

import pytest

from accounts.access import Actor
from tests.support.egress import policy
from tests.support.mcp import Agent as McpAgent
from tests.support.mcp import connect
from tests.support.runs import Agent, set_toml
from workspaces import actions as workspace_actions

pytestmark = pytest.mark.docker

URLOPEN = "python3 -c \"import urllib.request; urllib.request.urlopen('http://example.invalid')\""


@pytest.fixture
def shop(cast):
    # No template: no [setup] step unless a test writes one.
    return workspace_actions.create_workspace(cast.team_a, Actor(cast.carol), "Shop", "shop")


@pytest.fixture
def agent(client, cast, shop, run_stack):
    _, secret = cast.token(cast.carol, ["workspace:read", "workspace:write", "run"])
    return Agent(client, secret)


def test_a_command_without_network_says_so_and_how_to_allow_it(agent, berth_server, cast):
    done = agent.wait(agent.run(URLOPEN))
    assert (done["state"], done["reason"], done["exit_code"]) == ("failed", "exit_nonzero", 1)
    failure = done["network_failure"]
    assert failure["kind"] == "no_network" and failure["phase"] == "main"
    # What the log said, in its own words (glibc's, under runc and gVisor alike).
    assert any(
        sign in failure["evidence"]
        for sign in ("Name or service not known", "Temporary failure in name resolution")
    ), failure
    message = done["message"]
    assert message.startswith("The command exited with code 1: it tried to reach the network")
    assert "this sandbox had no network" in message and failure["evidence"] in message
    assert "add the host it needs to [network] egress in workspace.toml" in message
    assert "The team's egress ceiling must allow it too" in message
    assert failure["how_to_allow"] in message

    # One contract: an agent over MCP reads the same finding.
    _, secret = cast.token(cast.carol, ["workspace:read", "run"])

    async def body(mcp: McpAgent) -> dict:
        return await mcp("get_run", run_id=done["id"])

    seen = connect(berth_server, secret, body)
    assert seen["network_failure"] == failure and seen["message"] == message


def test_a_setup_that_needs_the_network_is_not_told_to_fix_setup(agent, shop, cast):
    set_toml(
        shop,
        cast,
        '[setup]\ncommand = "curl -sS https://pypi.org/simple/requests/ -o /deps/index"\n'
        'cache_key = ["workspace.toml"]\n',
    )
    done = agent.wait(agent.run("echo never"))
    assert (done["state"], done["reason"]) == ("failed", "setup_failed")
    failure = done["network_failure"]
    assert failure["kind"] == "no_network" and failure["phase"] == "setup"
    assert "Could not resolve host: pypi.org" in failure["evidence"]
    # Named from the log, with the host pip needs beside it; the team allows neither yet.
    assert [(d["host"], d["entry"], d["in_ceiling"]) for d in failure["destinations"]] == [
        ("pypi.org", "pypi.org", False),
        ("files.pythonhosted.org", "files.pythonhosted.org", False),
    ]
    message = done["message"]
    assert "Fix [setup]" not in message
    assert message.startswith("The [setup] command exited with code 6 and the command did not")
    assert 'add "pypi.org", "files.pythonhosted.org" to [network] egress' in message
    assert "outside the team's egress ceiling: a team admin must first add them" in message
    assert message.endswith("Nothing was cached.")


def test_a_destination_the_proxy_refused_is_named_with_its_entry(agent, shop, cast):
    policy(shop, cast, ["files.test:1"], ceiling=["files.test:1", "*.test"])
    done = agent.wait(agent.run("curl -sS http://other.test/x; exit 7"))
    assert (done["state"], done["reason"], done["exit_code"]) == ("failed", "exit_nonzero", 7)
    failure = done["network_failure"]
    assert failure["kind"] == "egress_denied"
    [dest] = failure["destinations"]
    # Inside the ceiling this time: the workspace only has to list it.
    assert (dest["host"], dest["entry"], dest["in_ceiling"]) == ("other.test", "other.test", True)
    assert "Berth's egress proxy refused" in done["message"]
    assert 'add "other.test" to [network] egress in workspace.toml' in done["message"]
    assert "outside the team's egress ceiling" not in done["message"]


def test_a_failure_that_is_not_the_network_keeps_its_plain_advice(agent):
    done = agent.wait(agent.run("echo 'connect to 127.0.0.1:5432: Connection refused' >&2; exit 2"))
    assert (done["reason"], done["network_failure"]) == ("exit_nonzero", None)
    assert done["message"] == "The command exited with code 2; the log says why."
