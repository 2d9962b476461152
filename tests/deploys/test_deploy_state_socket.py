"""A deploy's state door, `/ws/deploys/<id>`, which the review page follows: each move
at once, with the review page's access, closed at a state no move leaves.

The test moves the deploy as releasing does (DeployRequest.move, whose signal goes
after commit through the real Redis channel layer)."""

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async

from accounts.access import Actor
from deploys.models import DeployRequest, DeployState
from tests.support.logs import closed_with, open_socket, session_cookie
from workspaces.actions import create_workspace

pytestmark = [
    pytest.mark.usefixtures("data_dir", "fresh_channel_layer"),
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def deploy(cast) -> DeployRequest:
    workspace = create_workspace(cast.team_a, Actor(cast.alice), "Shop", "shop")
    return DeployRequest.objects.create(
        workspace=workspace, ref="main", commit="0" * 40, requested_by=cast.carol
    )


def move(deploy: DeployRequest, to: str, **fields: object) -> None:
    assert deploy.move(to, (deploy.state,), **fields)


def test_the_review_page_hears_each_move_up_to_live_and_then_the_end(cast, deploy):
    _, charlie = cast.token(cast.charlie)
    path = f"/ws/deploys/{deploy.public_id}"

    async def watch() -> None:
        for refused in (
            await open_socket(path, secret=charlie),  # another team's: as if none
            await open_socket(path),  # nobody signed in
            await open_socket("/ws/deploys/nosuchdeploy", secret=charlie),
        ):
            assert await closed_with(refused) == 4404
            await refused.disconnect()

        cookie = await database_sync_to_async(session_cookie)(cast.bob)
        ws = await open_socket(path, cookie=cookie)
        assert await ws.receive_json_from(timeout=5) == {
            "type": "state",
            "state": "requested",
            "reason": "",
        }
        for to in (DeployState.APPROVED, DeployState.BUILDING, DeployState.RELEASING):
            await database_sync_to_async(move)(deploy, to)
            assert (await ws.receive_json_from(timeout=5))["state"] == to
        await database_sync_to_async(move)(deploy, DeployState.LIVE)
        assert (await ws.receive_json_from(timeout=5))["state"] == "live"
        await database_sync_to_async(move)(deploy, DeployState.SUPERSEDED, reason="replaced")
        assert await ws.receive_json_from(timeout=5) == {
            "type": "state",
            "state": "superseded",
            "reason": "replaced",
        }
        assert await closed_with(ws) in (None, 1000)  # nothing more will change
        await ws.disconnect()

    async_to_sync(watch)()
