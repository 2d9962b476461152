"""A stopped run's /workspace goes up to the web host, which alone holds the workspace's
Git store (runs.workspace_up → runs.host_api → runs.outputs_up), through the real
daphne: in pieces that each say where they go (one sent again is kept once, one out of
turn is told where the upload is), read there into changes, artifacts and the commit,
the upload removed after. Every run of the suite sends its outputs this way on this
host (tests/runs/test_run_outputs.py); a run on host B, tests/hosts/test_two_hosts.py."""

import fcntl
import io
import os
import tarfile

import pytest
import requests

from accounts.access import Actor
from runs import outputs_up, retention, workspace_up
from runs.models import RunState
from sandbox.hosts import Host
from tests.support.hosts import local_host
from tests.support.runs import make_run
from workspaces.actions import create_workspace
from workspaces.store import open_store

pytestmark = [pytest.mark.usefixtures("berth_server")]


@pytest.fixture
def run(cast, settings):
    local_host()
    shop = create_workspace(cast.team_a, Actor(cast.alice), "Shop", "shop", "python-http")
    return make_run(
        shop,
        cast.alice,
        runner_host=settings.SANDBOX_HOST,
        state=RunState.RUNNING,
        commit_changes=True,
        artifact_paths=["dist"],
    )


def workspace_tar(run) -> bytes:
    """The run's commit as /workspace, with app.py changed and an artifact made."""
    out = io.BytesIO()
    with open_store(run.workspace) as store, tarfile.open(fileobj=out, mode="w") as tar:
        for path, _, sha in store.walk(run.commit):
            data = store.repo[sha].as_raw_string()
            if path == "app.py":
                data += b"# changed by the run\n"
            info = tarfile.TarInfo(f"workspace/{path}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        info = tarfile.TarInfo("workspace/dist/out.bin")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"\x00\x01\x02"))
    return out.getvalue()


def put(server, run, at: int, piece: bytes, token: str) -> requests.Response:
    return requests.post(
        f"{server.url}/internal/v1/runs/{run.public_id}/workspace?at={at}",
        data=piece,
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )


def test_the_workspace_goes_up_in_pieces_and_is_read_there_once(berth_server, run, settings):
    body, token = workspace_tar(run), settings.BERTH_HOST_TOKEN
    half = len(body) // 2
    assert put(berth_server, run, 0, body[:half], token).json() == {"size": half}
    # Sent again (its answer lost): kept once. Out of turn: told where it is.
    assert put(berth_server, run, 0, body[:half], token).json() == {"size": half}
    late = put(berth_server, run, half + 10, body[half:], token)
    assert late.status_code == 409 and late.json()["error"]["code"] == "upload_moved"
    assert late.json()["error"]["details"] == {"size": half}
    assert put(berth_server, run, half, body[half:], token).json() == {"size": len(body)}
    # Another host: no such run for it.
    other = Host.objects.create(name="b").issue_token()
    assert put(berth_server, run, 0, b"x", other).status_code == 404

    fields = workspace_up.webapi.client().post(
        f"/runs/{run.public_id}/outputs", {"size": len(body)}
    )
    assert fields["changes"]["modified"] == ["app.py"], fields["changes"]
    assert [a["path"] for a in fields["artifacts"]] == ["dist/out.bin"]
    assert fields["changes_commit"]  # commit_changes: on runs/<id>, made on the web host
    with open_store(run.workspace) as store:
        assert store.resolve(run.changes_branch) == fields["changes_commit"]
    assert not outputs_up.spool_path(run).exists()


def test_a_short_upload_is_read_as_unread_changes_never_half(berth_server, run, settings):
    body = workspace_tar(run)
    put(berth_server, run, 0, body[:1000], settings.BERTH_HOST_TOKEN)
    fields = workspace_up.webapi.client().post(
        f"/runs/{run.public_id}/outputs", {"size": len(body)}
    )
    assert "could not be read back" in fields["changes"]["error"]
    assert fields["changes"]["modified"] == [] and "artifacts" not in fields
    assert not outputs_up.spool_path(run).exists()


def test_an_ended_run_takes_no_upload(berth_server, run, settings):
    type(run).objects.filter(pk=run.pk).update(state=RunState.SUCCEEDED)
    refused = put(berth_server, run, 0, b"x", settings.BERTH_HOST_TOKEN)
    assert refused.status_code == 404 and refused.json()["error"]["code"] == "not_found"


def test_an_upload_past_the_runs_disk_cap_is_refused_typed(run, settings):
    """Bounded by what the volume could hold, whatever a runner sends."""
    settings.SANDBOX_MAX_INODES = 4
    run.limits = {**run.limits, "disk_mb": 1}
    cap = outputs_up.most_bytes(run)
    assert cap == (1 << 20) + 5 * 1024
    assert outputs_up.append(run, 0, b"x" * cap) == cap
    with pytest.raises(outputs_up.BerthError) as refused:
        outputs_up.append(run, cap, b"y")
    assert refused.value.code == "workspace_too_large" and refused.value.status == 413
    assert outputs_up.spool_path(run).stat().st_size == cap
    outputs_up.discard(run)


def test_an_upload_left_by_a_run_that_ended_is_swept_with_retention(run, cast):
    """Its agent died between sending it and asking for the read."""
    outputs_up.append(run, 0, b"left")
    ended = make_run(run.workspace, cast.alice, state=RunState.FAILED)
    outputs_up.append(ended, 0, b"left")
    assert retention.apply() == []
    assert outputs_up.spool_path(run).exists()  # still running: its read may come
    assert not outputs_up.spool_path(ended).exists()
    outputs_up.discard(run)


def test_a_piece_cut_short_is_sent_again_from_its_place(run):
    """A daphne restart or a full disk mid-piece leaves part of it: the sender's next
    try from the same offset replaces it; the same whole piece again is kept once; no
    piece goes in while the upload is being read."""
    assert outputs_up.append(run, 0, b"abc") == 3
    assert outputs_up.append(run, 3, b"XY") == 5  # as if cut short of "XYZW"
    assert outputs_up.append(run, 3, b"XY") == 5  # the same piece again: kept once
    assert outputs_up.append(run, 3, b"XYZW") == 7
    assert outputs_up.spool_path(run).read_bytes() == b"abcXYZW"
    with pytest.raises(outputs_up.Moved):
        outputs_up.append(run, 9, b"gap")
    fd = os.open(outputs_up.spool_path(run), os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # as read_spooled holds it
        with pytest.raises(outputs_up.Moved):
            outputs_up.append(run, 0, b"again")
    finally:
        os.close(fd)
    outputs_up.discard(run)
