"""A run's files come to its host from the web host's internal API (runs.host_api,
docs/hosts.md "The internal API"), never from a Git store the runner host opens: the
commit's tree and setup's key files as tars, through the real daphne, to the host the
run is placed on and to no other; the cache key's Git part read when the run is
queued. The worker's half (a run on host B with `[setup]`, its source and key files
fetched over the API) is tests/hosts/test_two_hosts.py; every run of the suite takes
the same path on this host."""

import io
import tarfile

import pytest
import requests

from accounts.access import Actor
from runs import actions as run_actions
from runs import caches, prepare
from runs.models import Run, RunState
from runs.outcomes import describe
from sandbox import backend
from sandbox.hosts import Host
from tests.support.hosts import local_host
from tests.support.runs import set_toml
from workspaces import actions as workspace_actions
from workspaces.archive import SMALL_TREE_BYTES
from workspaces.changes import Change
from workspaces.store import open_store

SETUP = """[setup]
command = "cp requirements.txt /deps/"
cache_key = ["requirements.txt", "locks", "absent.txt"]
"""


@pytest.fixture
def shop(cast):
    shop = workspace_actions.create_workspace(
        cast.team_a, Actor(cast.alice), "Shop", "shop", "python-http"
    )
    workspace_actions.commit_changes(
        shop,
        Actor(cast.alice),
        [
            Change("write", "requirements.txt", b"requests==2.32.3\n"),
            Change("write", "locks/a.lock", b"a\n"),
            Change("write", "locks/deep/b.lock", b"b\n"),
        ],
        "deps",
    )
    set_toml(shop, cast, SETUP)
    return shop


def queued(shop, cast, command: str = "true") -> Run:
    """A run asked for through its action, placed on this host (whose agent has beaten)
    and left waiting: no worker takes it here."""
    local_host().beat({})
    run = run_actions.start_run(shop, Actor(cast.alice), command)
    run.refresh_from_db()
    assert run.admitted_at is not None and run.runner_host == "local", run
    return run


def fetch(server, path: str, token: str) -> requests.Response:
    return requests.get(
        f"{server.url}/internal/v1{path}", headers={"Authorization": f"Bearer {token}"}, timeout=30
    )


def members(body: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        return {m.name: m for m in tar.getmembers()}


def test_a_host_gets_the_files_of_a_run_placed_on_it_and_of_no_other(
    berth_server, cast, shop, settings
):
    run = queued(shop, cast)
    # The key's Git part, read when it was queued: each entry with its mode and object
    # id, an absent one named as absent.
    with open_store(shop) as store:
        head = store.resolve("main")
        expected = [
            ["requirements.txt", *_entry(store, head, "requirements.txt")],
            ["locks", *_entry(store, head, "locks")],
            ["absent.txt", None],
        ]
    assert run.setup["key_entries"] == expected

    source = fetch(berth_server, f"/runs/{run.public_id}/source", settings.BERTH_HOST_TOKEN)
    assert source.status_code == 200 and source.headers["Content-Type"] == "application/x-tar"
    tree = members(source.content)
    assert {"requirements.txt", "locks/deep/b.lock", "workspace.toml"} <= set(tree)
    with tarfile.open(fileobj=io.BytesIO(source.content)) as tar:
        assert tar.extractfile("locks/deep/b.lock").read() == b"b\n"

    keyed = fetch(berth_server, f"/runs/{run.public_id}/key-files", settings.BERTH_HOST_TOKEN)
    assert keyed.status_code == 200, keyed.text
    files = members(keyed.content)
    # Only the key's entries (and their folders), every time stamp fixed.
    assert set(files) == {
        "requirements.txt",
        "locks",
        "locks/a.lock",
        "locks/deep",
        "locks/deep/b.lock",
    }
    assert {m.mtime for m in files.values()} == {caches.KEY_FILES_MTIME}

    # Another host's token: no such run for it. A user's token: no host at all.
    other = Host.objects.create(name="b").issue_token()
    for path in (f"/runs/{run.public_id}/source", f"/runs/{run.public_id}/key-files"):
        refused = fetch(berth_server, path, other)
        assert refused.status_code == 404, refused.text
        assert refused.json()["error"]["code"] == "not_found"
    _, user_token = cast.token(cast.alice)
    assert fetch(berth_server, f"/runs/{run.public_id}/source", user_token).status_code == 401

    # Once it ended, it is no run waiting to be prepared: nothing is served of it.
    Run.objects.filter(pk=run.pk).update(state=RunState.CANCELLED)
    gone = fetch(berth_server, f"/runs/{run.public_id}/source", settings.BERTH_HOST_TOKEN)
    assert gone.status_code == 404


def test_a_large_tree_is_streamed_to_the_worker_whole(berth_server, cast, shop, settings):
    # Past SMALL_TREE_BYTES: sent chunk by chunk (no length), every byte there.
    big = bytes(range(256)) * (SMALL_TREE_BYTES // 256 // 3 + 1)
    workspace_actions.commit_changes(
        shop,
        Actor(cast.alice),
        [Change("write", f"data/{i}.bin", big) for i in range(4)],
        "big",
    )
    run = queued(shop, cast)
    source = fetch(berth_server, f"/runs/{run.public_id}/source", settings.BERTH_HOST_TOKEN)
    assert source.status_code == 200
    assert "Content-Length" not in source.headers
    with tarfile.open(fileobj=io.BytesIO(source.content)) as tar:
        for i in range(4):
            assert tar.extractfile(f"data/{i}.bin").read() == big

    # The worker's side of the same: what it hands the engine is the whole tar.
    chunks = prepare._source(run)
    assert not isinstance(chunks, bytes)
    assert b"".join(chunks) == source.content


def test_a_web_host_that_does_not_answer_ends_the_fetch_web_unavailable(
    cast, shop, settings, tmp_path
):
    from tests.support.servers import free_port

    run = queued(shop, cast)
    settings.BERTH_WEB_URL = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(backend.SandboxError) as failed:
        prepare._source(run)
    assert failed.value.reason == "web_unavailable"
    assert settings.BERTH_WEB_URL in failed.value.facts["detail"]
    state, message = describe("web_unavailable", **failed.value.facts)
    assert state == RunState.ERROR and "BERTH_WEB_URL" in message
    # A host given no token (its keys dir holds none): the same, saying where one comes
    # from, never an unexpected error.
    settings.BERTH_HOST_TOKEN, settings.KEYS_DIR = "", tmp_path
    with pytest.raises(backend.SandboxError) as failed:
        prepare._source(run)
    assert failed.value.reason == "web_unavailable"
    assert "no token" in str(failed.value.facts["detail"])


def _entry(store, commit: str, path: str) -> list:
    mode, sha = store.lookup(commit, path)
    return [mode, sha.decode()]
