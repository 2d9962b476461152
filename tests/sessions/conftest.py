import pytest

from accounts.access import Actor
from tests.support.sessions import SessionAgent
from workspaces import actions as workspace_actions


@pytest.fixture
def shop(cast):
    return workspace_actions.create_workspace(
        cast.team_a, Actor(cast.carol), "Shop", "shop", "python-http"
    )


@pytest.fixture
def agent(client, cast, shop, run_stack) -> SessionAgent:
    _, secret = cast.token(cast.carol, ["workspace:read", "workspace:write", "run"])
    return SessionAgent(client, secret)
