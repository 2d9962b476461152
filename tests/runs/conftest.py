"""The secrets' fixtures: alice's `notes` workspace and her token's header."""

import pytest

from accounts.access import Actor
from tests.support.api import bearer
from workspaces import actions as workspace_actions


@pytest.fixture
def notes(cast):
    # No template: no [setup] step, so a run is just the command.
    return workspace_actions.create_workspace(cast.team_a, Actor(cast.alice), "Notes", "notes")


@pytest.fixture
def alice_api(client, cast, notes):
    _, secret = cast.token(cast.alice, ["workspace:read", "workspace:write", "run"])
    return bearer(secret)
