"""A session's doors on the web host's internal API (sessions.host_api; docs/hosts.md),
through the real daphne, for the host the session is placed on and no other: a sync's
files batch by batch (sessions.syncplan), from the base its row records now, while the
sync is pending; a terminal's transcript sent in chunks that say where they go
(sessions.transcripts), one sent twice refused. The agent's half (a write reaching a
live session, conflicts kept; a transcript masked and resumed after an agent restart)
is the suite's session tests (tests/sessions/test_session_sync.py,
tests/sessions/test_session_terminals.py, tests/hosts/test_two_hosts.py on host b),
which take these paths on every host."""

import base64

import pytest
import requests
from django.conf import settings

from accounts.access import Actor
from sandbox.hosts import Host
from sessions import syncplan, transcripts
from sessions.models import (
    Session,
    SessionState,
    SessionSync,
    Snapshot,
    SnapshotState,
    SyncState,
    Terminal,
)
from sessions.tasks import sweep_transcripts
from tests.support.runs import head
from tests.support.sessions import session_row
from workspaces import actions as workspace_actions
from workspaces.changes import Change
from workspaces.store import open_store


def post(server, path: str, token: str, body: dict) -> requests.Response:
    return requests.post(
        f"{server.url}/internal/v1{path}",
        headers={"Authorization": f"Bearer {token}"},
        json=body,
        timeout=30,
    )


def live_session(shop, base: str) -> Session:
    return session_row(shop, base_commit=base, runner_host="local", state=SessionState.READY)


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
    berth_server, cast, shop, settings
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
    session = live_session(shop, base)
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


def test_a_transcript_is_appended_where_each_chunk_says_and_never_twice(
    berth_server, cast, shop, settings
):
    session = live_session(shop, head(shop))
    term = Terminal.objects.create(session=session, name="shell")
    path = f"/terminals/{term.public_id}/transcript"
    token = settings.BERTH_HOST_TOKEN
    assert get(berth_server, path, token).json() == {"raw": 0, "size": 0}

    def chunk(data: bytes, size: int, raw: int) -> requests.Response:
        return post(
            berth_server,
            path,
            token,
            {"size": size, "raw": raw, "data": base64.b64encode(data).decode()},
        )

    assert chunk(b"$ echo hi\r\n", 0, 12).json() == {"raw": 12, "size": 11}
    assert chunk(b"hi\r\n", 11, 16).json() == {"raw": 16, "size": 15}
    # The second chunk sent again (its answer lost): refused, saying where it is.
    again = chunk(b"hi\r\n", 11, 16)
    assert again.status_code == 409, again.text
    error = again.json()["error"]
    assert error["code"] == "transcript_moved" and error["details"] == {"raw": 16, "size": 15}
    assert transcripts.read_transcript(term) == b"$ echo hi\r\nhi\r\n"
    # Where a restarted recorder goes on from.
    assert get(berth_server, path, token).json() == {"raw": 16, "size": 15}

    bad = post(berth_server, path, token, {"size": 15, "raw": 17, "data": "not base64!"})
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid"
    # Another host's token: no such terminal for it; nor once its session is deleted.
    other = Host.objects.create(name="b").issue_token()
    assert get(berth_server, path, other).status_code == 404
    assert chunk(b"x", 15, 17).status_code == 200
    Session.objects.filter(pk=session.pk).update(state=SessionState.DELETED)
    assert get(berth_server, path, token).status_code == 404
    assert transcripts.read_transcript(term) == b"$ echo hi\r\nhi\r\nx"


def test_the_web_host_sweeps_the_transcripts_of_sessions_deleted_elsewhere(cast, shop):
    """A session its host's agent deleted (its retention) had its volume removed there;
    its transcripts are the web host's, swept by beat's task on the web queue."""
    kept, deleted = live_session(shop, head(shop)), live_session(shop, head(shop))
    for session in (kept, deleted):
        term = Terminal.objects.create(session=session, name="shell")
        transcripts.append(term, b"$ ls\r\n", 0, 6)
    Session.objects.filter(pk=deleted.pk).update(state=SessionState.DELETED)
    assert settings.CELERY_BEAT_SCHEDULE["sweep-transcripts"]["task"] == sweep_transcripts.name
    sweep_transcripts()
    assert transcripts.transcript_dir(kept).is_dir()
    assert not transcripts.transcript_dir(deleted).exists()


def test_a_syncs_plan_is_made_for_its_first_batch_and_kept_for_the_rest(
    db, cast, shop, monkeypatch
):
    """Its two trees are compared once, not once a batch: a sync of many files in
    many batches stays linear in its size."""
    base = head(shop)
    big = b"x" * (syncplan.BATCH_BYTES // 2 + 1)
    names = [f"f{n}.bin" for n in range(4)]
    target = commit(shop, cast, [Change("write", name, big) for name in names])
    session = live_session(shop, base)
    made = []
    real = syncplan.plan
    monkeypatch.setattr(syncplan, "plan", lambda *a: made.append(a) or real(*a))
    at, got = 0, []
    while True:
        batch = syncplan.batch_at(session, base, target, at)
        got += [f["path"] for f in batch.files]
        at = batch.next
        if at >= batch.total:
            break
    assert got == names and len(made) == 1
    # The next sync's first batch makes it again (what the branch holds now).
    assert syncplan.batch_at(session, base, target, 0).files[0]["path"] == "f0.bin"
    assert len(made) == 2


def test_a_read_in_progress_is_its_hosts_alone_and_records_its_tree(
    berth_server, cast, shop, settings
):
    """Driven through the doors as a session's agent drives it (sessions.reader): the
    channel's answers handed in, the tree built and recorded on the web host."""
    base = head(shop)
    session = live_session(shop, base)
    row = Snapshot.objects.create(session=session)
    opened = post(
        berth_server, f"/sessions/{session.public_id}/reads", settings.BERTH_HOST_TOKEN, {}
    )
    assert opened.status_code == 200, opened.text
    token = opened.json()["read"]
    path = f"/reads/{token}"
    other = Host.objects.create(name="b").issue_token()
    assert post(berth_server, f"{path}/entries", other, {"entries": []}).status_code == 404
    assert get(berth_server, f"{path}/wanted", other).status_code == 404

    # The channel's manifest: the base's files as they are, and one new file.
    with open_store(shop) as store:
        listed = [
            {
                "path": p,
                "type": "file",
                "size": len(store.repo[sha].as_raw_string()),
                "mode": f"{mode:o}",
                "sha": sha.decode(),
            }
            for p, mode, sha in store.walk(base)
            if "/" not in p
        ]
    # What the sandbox says of a file is its word only: a size that is no number and
    # an id that is none make it a file to read, never a fault of the web host's.
    listed.append(
        {"path": "odd.txt", "type": "file", "size": "junk", "mode": "100644", "sha": "z" * 40}
    )
    new = b"made in the session\n"
    listed.append(
        {"path": "new.txt", "type": "file", "size": len(new), "mode": "100644", "sha": "0" * 40}
    )
    taken = post(berth_server, f"{path}/entries", settings.BERTH_HOST_TOKEN, {"entries": listed})
    assert taken.status_code == 200, taken.text
    assert get(berth_server, f"{path}/wanted", settings.BERTH_HOST_TOKEN).json() == {
        "paths": ["new.txt", "odd.txt"]
    }
    data = base64.b64encode(new).decode()
    files = {
        "files": [
            {"path": "new.txt", "type": "file", "data": data},
            {"path": "odd.txt", "type": "file", "data": base64.b64encode(b"odd\n").decode()},
        ]
    }
    assert post(berth_server, f"{path}/contents", settings.BERTH_HOST_TOKEN, files).json() == {
        "taken": True
    }
    assert post(berth_server, f"{path}/finish", settings.BERTH_HOST_TOKEN, {}).status_code == 200
    row.refresh_from_db()
    assert row.state == SnapshotState.DONE and row.tree, (row.state, row.error)
    # Done: the token is no read any more.
    assert get(berth_server, f"{path}/wanted", settings.BERTH_HOST_TOKEN).status_code == 404
