import contextlib

import docker.errors
import pytest

from accounts.access import Actor
from sandbox import backend
from sandbox.models import Sandbox, SandboxKind
from sessions.models import Session
from tests.support.api import bearer
from tests.support.secrets import VALUE
from tests.support.sessions import SessionAgent
from workspaces import actions as workspace_actions


@pytest.fixture
def shop(cast):
    return workspace_actions.create_workspace(
        cast.team_a, Actor(cast.carol), "Shop", "shop", "python-http"
    )


@pytest.fixture
def api_key(client, cast, shop):
    """The workspace's secret API_KEY (tests.support.secrets.VALUE), set by alice."""
    _, alice = cast.token(cast.alice, ["workspace:read", "workspace:write", "run"])
    r = client.put(
        "/api/v1/workspaces/shop/secrets/API_KEY",
        {"value": VALUE},
        content_type="application/json",
        **bearer(alice),
    )
    assert r.status_code in (200, 201), r.content


@pytest.fixture
def agent(client, cast, shop, run_stack) -> SessionAgent:
    _, secret = cast.token(cast.carol, ["workspace:read", "workspace:write", "run"])
    return SessionAgent(client, secret)


@pytest.fixture(autouse=True)
def _no_session_left(request):
    """A session outlives its test (its container waits for execs): after each test on
    the real stack, its sessions' containers and volumes are removed, so none piles up
    on the engine. (The database is asked for here, so it is torn down after this.)"""
    if "run_stack" not in request.fixturenames:
        yield
        return
    request.getfixturevalue("transactional_db")
    yield
    # Best effort: a container a worker is still making as the test ends holds its
    # volume (409); the runner agent's sweep of a later test run takes what is left.
    for sandbox in Sandbox.objects.filter(kind=SandboxKind.SESSION):
        with contextlib.suppress(docker.errors.APIError):
            backend.remove_sandbox(sandbox.name)
    for session in Session.objects.all():
        with contextlib.suppress(docker.errors.APIError):
            backend.remove_sandbox(session.volume)
