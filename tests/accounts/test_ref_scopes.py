"""Writing a ref needs `workspace:write`, on every door: a token with only the `run`
scope can run commands but never make a branch, whether it asks for `commit_changes`
in the run request, replays a run that asked for it, or commits a run's changes
afterwards."""

import pytest

from accounts.access import Actor
from runs.models import Run
from tests.support.api import bearer
from tests.support.runs import finished_run
from workspaces import actions as workspace_actions
from workspaces.store import open_store


@pytest.fixture
def shop(cast):
    return workspace_actions.create_workspace(
        cast.team_a, Actor(cast.carol), "Shop", "shop", "python-http"
    )


@pytest.fixture
def runner_only(cast):
    _, secret = cast.token(cast.carol, ["workspace:read", "run"])
    return bearer(secret)


def refused(response) -> None:
    assert response.status_code == 403, response.content
    error = response.json()["error"]
    assert error["code"] == "missing_scope" and error["details"]["scope"] == "workspace:write"
    assert "runs/<id>" in error["message"]


def test_a_run_only_token_cannot_ask_for_its_changes_committed(client, cast, shop, runner_only):
    r = client.post(
        "/api/v1/workspaces/shop/runs",
        {"command": "true", "commit_changes": True},
        content_type="application/json",
        **runner_only,
    )
    refused(r)
    assert not Run.objects.exists()  # nothing recorded, nothing queued


def test_a_run_only_token_cannot_replay_a_run_that_commits(client, cast, shop, runner_only):
    done = finished_run(shop, cast.carol, commit_changes=True)
    r = client.post(
        f"/api/v1/runs/{done.public_id}/rerun", {}, content_type="application/json", **runner_only
    )
    refused(r)
    assert Run.objects.count() == 1


def test_a_run_only_token_cannot_commit_a_runs_changes_afterwards(client, cast, shop, runner_only):
    done = finished_run(shop, cast.carol, changes={"tree": "a" * 40, "modified": ["app.py"]})
    refused(client.post(f"/api/v1/runs/{done.public_id}/commit-changes", **runner_only))
    done.refresh_from_db()
    assert done.changes_commit == ""
    with open_store(shop) as store:
        assert set(store.branches()) == {"main"}
