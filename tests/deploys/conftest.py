"""The deploys' fixture: alice's agent, whose token may ask for a deploy of `shop` (each
module makes its own `shop`)."""

import pytest

from tests.support.deploys import Requester


@pytest.fixture
def agent(client, cast, shop, run_stack, berth_server) -> Requester:
    _, secret = cast.token(cast.alice, ["workspace:read", "deploy:request"])
    return Requester(client, secret)
