"""A preview whose [setup] failed on the network says so, and how to allow the host,
instead of "Fix [setup]" (issue 26, item 2): the API's answer, from a real sandbox."""

import pytest

from tests.support.previews import ENDED, probe_toml, write

pytestmark = pytest.mark.docker

SETUP = (
    '\n[setup]\ncommand = "curl -sS https://registry.npmjs.org/left-pad -o /deps/pkg"\n'
    'cache_key = ["workspace.toml"]\n'
)


def test_a_preview_whose_setup_needs_the_network_says_how_to_allow_it(agent, cast, probe):
    write(probe, cast.carol, {"workspace.toml": probe_toml() + SETUP})
    preview = agent.wait(agent.start(), ENDED)
    assert (preview["state"], preview["reason"]) == ("failed", "setup_failed")
    message = preview["message"]
    assert message.startswith("The [setup] command failed on the network, so the app never")
    assert "Could not resolve host: registry.npmjs.org" in message
    assert 'add "registry.npmjs.org" to [network] egress in workspace.toml' in message
    assert "Fix [setup]" not in message and message.endswith("Then restart.")
