import pytest

from accounts.access import Actor
from sandbox import backend
from sandbox.models import Sandbox, SandboxKind
from sessions.models import Session
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


@pytest.fixture(autouse=True)
def _no_session_left(transactional_db):
    """A session outlives its test (its container waits for execs): each test's are
    removed after it, containers and volumes, so none piles up on the engine."""
    yield
    for sandbox in Sandbox.objects.filter(kind=SandboxKind.SESSION):
        backend.remove_sandbox(sandbox.name)
    for session in Session.objects.all():
        backend.remove_sandbox(session.volume)
