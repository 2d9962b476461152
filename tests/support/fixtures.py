"""The fixtures every folder may use (loaded by tests/conftest.py): the cast, the real
servers (daphne, a Celery worker, the runner agent) and a few the folders share."""

import http.server
import os
import threading
from collections.abc import Iterator

import pytest
from channels.layers import channel_layers
from django.contrib.auth.models import User
from django.test import Client

from accounts import actions
from accounts.access import Actor
from accounts.models import ApiToken, Role, Team
from tests.support import servers
from tests.support.egress import Files
from tests.support.hosts import local_host
from tests.support.runs import Agent
from workspaces import actions as workspace_actions


class Cast:
    """The test cast: alice admin, bob reviewer, carol member of team A;
    charlie in team B."""

    def __init__(self) -> None:
        self.team_a, _ = actions.create_team("team-a", "Team A")
        self.team_b, _ = actions.create_team("team-b", "Team B")
        self.alice = self._user("alice", self.team_a, Role.ADMIN)
        self.bob = self._user("bob", self.team_a, Role.REVIEWER)
        self.carol = self._user("carol", self.team_a, Role.MEMBER)
        self.charlie = self._user("charlie", self.team_b, Role.ADMIN)
        self.host = local_host()

    @staticmethod
    def _user(name: str, team: Team, role: str) -> User:
        user, _ = actions.create_user(team, name, role, None, password=f"{name}-password-1")
        return user

    def token(
        self, user: User, scopes: list[str] | None = None, team: Team | None = None, **kwargs
    ) -> tuple[ApiToken, str]:
        team = team or (self.team_b if user == self.charlie else self.team_a)
        return actions.create_token(
            team, user, f"{user} agent", scopes or list(ApiToken.SCOPES), None, **kwargs
        )


@pytest.fixture
def cast(db) -> Cast:
    return Cast()


@pytest.fixture
def signed_in(cast):
    def client_for(user: User) -> Client:
        client = Client()
        client.force_login(user)
        return client

    return client_for


@pytest.fixture(scope="session")
def _daphne(django_db_setup) -> Iterator[servers.Server]:
    # On the port the test's worker and agent reach the internal API at.
    with servers.daphne(port=int(os.environ["TEST_WEB_PORT"])) as server:
        yield server


@pytest.fixture
def berth_server(transactional_db, _daphne) -> servers.Server:
    """A real daphne serving the test database (data must be committed: transactional)."""
    return _daphne


@pytest.fixture
def celery_worker(transactional_db, _run_stack):
    """A real Celery worker on the test database and test Redis."""
    return _run_stack.worker.proc


class Restartable:
    """A real process for the whole session that a test may SIGKILL and start again."""

    def __init__(self, factory) -> None:
        self.factory = factory
        self.start()

    def start(self) -> None:
        self.context = self.factory()
        self.proc = self.context.__enter__()

    def stop(self) -> None:
        self.context.__exit__(None, None, None)

    def kill(self) -> None:
        """SIGKILL, as a crash would; `start()` brings it back."""
        self.proc.kill()
        self.proc.wait()
        self.stop()


class RunStack:
    def __init__(self) -> None:
        self.worker = Restartable(servers.celery_worker)
        self.agent = Restartable(servers.runner_agent)

    def stop(self) -> None:
        self.agent.stop()
        self.worker.stop()


@pytest.fixture(scope="session")
def _run_stack(django_db_setup, _daphne):
    stack = RunStack()
    yield stack
    stack.stop()


@pytest.fixture
def run_stack(transactional_db, _run_stack) -> RunStack:
    """A real Celery worker and runner agent (and daphne) on the test database."""
    return _run_stack


@pytest.fixture
def data_dir(settings, tmp_path):
    """Logs in a directory of the test's own (they are files, not rows to roll back);
    the log tests ask for it with `usefixtures`."""
    settings.DATA_DIR = tmp_path


@pytest.fixture
def fresh_channel_layer():
    """A channel layer per test: each test runs an event loop of its own, and a
    channels_redis layer shared across loops fails ("bound to a different event loop");
    daphne has one loop for its life."""
    channel_layers.backends.clear()
    yield
    channel_layers.backends.clear()


@pytest.fixture
def agents(client, cast, run_stack) -> tuple[Agent, Agent]:
    """carol's agent on team A's `shop`, charlie's on team B's `shop`."""
    for team, user in ((cast.team_a, cast.carol), (cast.team_b, cast.charlie)):
        workspace_actions.create_workspace(team, Actor(user), "Shop", "shop", "python-http")
    _, a = cast.token(cast.carol, ["workspace:read", "run"])
    _, b = cast.token(cast.charlie, ["workspace:read", "run"])
    return Agent(client, a), Agent(client, b)


@pytest.fixture
def files() -> Iterator[int]:
    """A host-local HTTP server on 127.0.0.1: sandboxes reach it as files.test:<port>
    (the egress tests, of runs and of sessions)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Files)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    thread.join()
