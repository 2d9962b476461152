"""A preview's state door, `/ws/previews/<id>/state`, which the workspace page's
preview pane follows: each move at once (ready, stopped, a restart's new process), with
the preview's access; it stays open, for a stopped preview may be restarted.

The test moves the preview as the agent and a user do (previews.lifecycle,
previews.actions, whose signals go after commit through the real Redis channel layer)."""

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async

from accounts.access import Actor
from previews import actions, lifecycle
from previews.models import Preview
from tests.support.logs import closed_with, open_socket
from workspaces.actions import create_workspace

pytestmark = [
    pytest.mark.usefixtures("data_dir", "fresh_channel_layer"),
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def preview(cast) -> Preview:
    workspace = create_workspace(cast.team_a, Actor(cast.alice), "Shop", "shop")
    return Preview.objects.create(
        workspace=workspace, ref="main", commit="0" * 40, command="serve", port=8000
    )


def test_the_pane_hears_ready_then_a_stop_and_others_are_refused(cast, preview):
    _, charlie = cast.token(cast.charlie)
    _, carol = cast.token(cast.carol)
    path = f"/ws/previews/{preview.public_id}/state"

    async def watch() -> None:
        for refused in (await open_socket(path, secret=charlie), await open_socket(path)):
            assert await closed_with(refused) == 4404
            await refused.disconnect()

        ws = await open_socket(path, secret=carol)
        assert await ws.receive_json_from(timeout=5) == {
            "type": "state",
            "state": "starting",
            "reason": "",
            "run": None,
        }
        await database_sync_to_async(lifecycle.mark_ready)(preview, 200)
        assert (await ws.receive_json_from(timeout=5))["state"] == "ready"
        await database_sync_to_async(actions.stop_preview)(preview, Actor(cast.carol))
        assert await ws.receive_json_from(timeout=5) == {
            "type": "state",
            "state": "stopped",
            "reason": "stopped_by_user",
            "run": None,
        }
        await ws.disconnect()

    async_to_sync(watch)()
