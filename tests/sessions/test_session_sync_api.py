"""A session sync's files come to its host's agent from the web host's internal API
(sessions.host_api, sessions.syncplan; docs/hosts.md), batch by batch, through the real
daphne: to the host the session is placed on and no other, while the sync is pending,
from the base its row records now. The agent's half (a write reaching a live session,
conflicts kept) is the suite's session tests (tests/sessions/test_session_sockets.py,
tests/hosts/test_two_hosts.py on host b), which take this path on every host."""

import base64

import pytest
import requests

from accounts.access import Actor
from sandbox.hosts import Host
from sessions import syncplan
from sessions.models import Session, SessionState, SessionSync, SyncState
from tests.support.runs import head
from workspaces import actions as workspace_actions
from workspaces.changes import Change


@pytest.fixture
def shop(cast):
    return workspace_actions.create_workspace(
        cast.team_a, Actor(cast.alice), "Shop", "shop", "python-http"
    )


def commit(shop, cast, changes: list[Change]) -> str:
    workspace_actions.commit_changes(shop, Actor(cast.alice), changes, "change")
    return head(shop)


def get(server, path: str, token: str) -> requests.Response:
    return requests.get(
        f"{server.url}/internal/v1{path}", headers={"Authorization": f"Bearer {token}"}, timeout=30
    )


def test_a_host_gets_a_pending_syncs_files_in_batches_and_no_other_host_does(
    berth_server, cast, shop, settings, monkeypatch
):
    base = head(shop)
    big = b"x" * (syncplan.BATCH_BYTES // 2 + 1)  # two of them never share a batch
    target = commit(
        shop,
        cast,
        [
            Change("write", "one.bin", big),
            Change("write", "two.bin", big),
            Change("delete", "README.md", b""),
        ],
    )
    session = Session.objects.create(
        workspace=shop,
        ref="main",
        base_commit=base,
        runtime="runc",
        runner_host="local",
        state=SessionState.READY,
        idle_freeze_s=60,
        idle_stop_s=60,
        lifetime_s=60,
        retention_s=60,
    )
    row = SessionSync.objects.create(session=session, commit=target)
    path = f"/sessions/{session.public_id}/syncs/{row.pk}"

    batches, at = [], 0
    while True:
        answer = get(berth_server, f"{path}?at={at}", settings.BERTH_HOST_TOKEN)
        assert answer.status_code == 200, answer.text
        batch = answer.json()
        batches.append(batch)
        at = batch["next"]
        if at >= batch["total"]:
            break
    # The deletion first, then each write with its content, in batches of BATCH_BYTES:
    # the two files never share one.
    assert [b["total"] for b in batches] == [3, 3]
    assert [[f["path"] for f in b["files"]] for b in batches] == [
        ["README.md", "one.bin"],
        ["two.bin"],
    ]
    files = [f for b in batches for f in b["files"]]
    assert [(f["path"], f["content"] is None) for f in files] == [
        ("README.md", True),
        ("one.bin", False),
        ("two.bin", False),
    ]
    assert base64.b64decode(files[1]["content"]) == big
    # Each path's base, for a conflict's record: README.md's blob, none for a new file.
    assert batches[0]["bases"]["README.md"]["sha"] == files[0]["base"] is not None
    assert batches[0]["bases"]["one.bin"] is None and batches[1]["bases"] == {"two.bin": None}

    # Another host's token: no such session. A sync no longer pending: nothing.
    other = Host.objects.create(name="b").issue_token()
    assert get(berth_server, path, other).status_code == 404
    SessionSync.objects.filter(pk=row.pk).update(state=SyncState.APPLIED)
    assert get(berth_server, path, settings.BERTH_HOST_TOKEN).status_code == 404

    # A base gone from the store: the sync fails, said plainly.
    gone = SessionSync.objects.create(session=session, commit=target)
    Session.objects.filter(pk=session.pk).update(base_commit="0" * 40)
    answer = get(
        berth_server, f"/sessions/{session.public_id}/syncs/{gone.pk}", settings.BERTH_HOST_TOKEN
    )
    assert answer.status_code == 422 and answer.json()["error"]["code"] == "commit_unreadable"
    # A session no longer live: no door.
    Session.objects.filter(pk=session.pk).update(state=SessionState.STOPPED)
    assert get(berth_server, path, settings.BERTH_HOST_TOKEN).status_code == 404
