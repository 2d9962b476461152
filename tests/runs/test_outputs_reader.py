"""Reading a stopped run's /workspace: on the host, never following a link, and the same
answer as the engine's archive of it."""

import io
import os
import tarfile
import threading
from pathlib import Path

import pytest
from docker.types import Mount

from accounts.access import Actor
from runs import artifacts
from runs.models import Run
from runs.outputs import read_outputs, walk_volume
from runs.secrets import Masker
from runs.workspace_up import volume_tar
from sandbox.engine import engine
from workspaces import actions as workspace_actions
from workspaces.store import open_store


def test_the_host_walk_never_follows_a_link_or_blocks_on_a_fifo(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.txt").write_text("a")
    os.link(tmp_path / "src" / "a.txt", tmp_path / "hard.txt")
    (tmp_path / "passwd").symlink_to("/etc/passwd")
    (tmp_path / "etc").symlink_to("/etc")
    os.mkfifo(tmp_path / "fifo")
    result: dict = {}
    # A FIFO opened for reading would block forever: the walk must finish on its own.
    walker = threading.Thread(
        target=lambda: result.update(
            {m.name: (m, opener) for m, opener in walk_volume(str(tmp_path))}
        )
    )
    walker.start()
    walker.join(10)
    assert not walker.is_alive()
    kinds = {name: m.type for name, (m, _) in result.items()}
    assert kinds["workspace/src"] == tarfile.DIRTYPE
    assert kinds["workspace/passwd"] == tarfile.SYMTYPE
    assert result["workspace/passwd"][0].linkname == "/etc/passwd"
    assert kinds["workspace/etc"] == tarfile.SYMTYPE
    assert not any(name.startswith("workspace/etc/") for name in result)  # not descended
    assert kinds["workspace/fifo"] == tarfile.FIFOTYPE
    hard = {kinds["workspace/hard.txt"], kinds["workspace/src/a.txt"]}
    assert hard == {tarfile.REGTYPE, tarfile.LNKTYPE}  # the second sight is a hard link
    member, opener = result["workspace/src/a.txt"]
    if member.type == tarfile.REGTYPE:
        with opener() as f:
            assert f.read() == b"a"


@pytest.mark.docker
def test_the_host_walk_and_the_engine_archive_agree(db, cast, tmp_path):
    shop = workspace_actions.create_workspace(
        cast.team_a, Actor(cast.carol), "Shop", "shop", "python-http"
    )
    with open_store(shop) as store:
        head = store.branch_head("main")
    run = Run(workspace=shop, commit=head, command="-", artifact_paths=["dist", "link"])
    name = f"berth-test-outputs-{run.public_id}"
    engine().volumes.create(name)
    container = None
    try:
        container = engine().containers.create(
            "berth-sandbox:bookworm",
            [
                "sh",
                "-c",
                "cd /workspace && mkdir -p dist && echo x > dist/a "
                "&& echo changed >> app.py && ln -s /etc/passwd link "
                "&& mkfifo fifo && rm README.md",
            ],
            mounts=[Mount("/workspace", name, type="volume")],
            network_mode="none",
            user="0:0",
        )
        with open_store(shop) as store:
            from workspaces.archive import tree_tarball

            container.put_archive("/workspace", tree_tarball(store, head))
        container.start()
        assert container.wait(timeout=60)["StatusCode"] == 0
        root = engine().volumes.get(name).attrs["Mountpoint"]
        with open_store(shop) as store:
            # As a runner host sends it up (runs.workspace_up): the volume walked on
            # the host, written as a tar stream.
            host = read_outputs(store, run, Masker([]), chunks=volume_tar(root))
        chunks, _ = container.get_archive("/workspace")
        with open_store(shop) as store:
            archived = read_outputs(store, run, Masker([]), chunks=chunks)
        assert host.changes == archived.changes
        assert host.artifacts == archived.artifacts and host.refused == archived.refused
        assert host.changes["modified"] == ["app.py"]
        assert host.changes["deleted"] == ["README.md"]
        assert [a["path"] for a in host.artifacts] == ["dist/a"]
        assert "symlink" in {r["path"]: r["why"] for r in host.refused}["link"]
    finally:
        if container is not None:
            container.remove(force=True)
        engine().volumes.get(name).remove(force=True)


def test_artifacts_go_to_whatever_storage_the_operator_names(db, cast, settings):
    """Kept through Django's storage API (runs.artifacts): with another backend (here
    Django's in-memory one, as django-storages' S3 would be named) the artifact is
    kept and served from it, and nothing is written under DATA_DIR."""
    settings.STORAGES = {
        **settings.STORAGES,
        "artifacts": {"BACKEND": "django.core.files.storage.InMemoryStorage"},
    }
    shop = workspace_actions.create_workspace(
        cast.team_a, Actor(cast.carol), "Shop", "shop", "python-http"
    )
    with open_store(shop) as store:
        head = store.branch_head("main")
    run = Run.objects.create(
        workspace=shop, ref="main", commit=head, command="true", artifact_paths=["dist"]
    )
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        for name in ("workspace", "workspace/dist"):
            folder = tarfile.TarInfo(name)
            folder.type = tarfile.DIRTYPE
            tar.addfile(folder)
        report = tarfile.TarInfo("workspace/dist/report.txt")
        report.size = 3
        tar.addfile(report, io.BytesIO(b"ok\n"))
    with open_store(shop) as store:
        out = read_outputs(store, run, Masker([]), chunks=iter([archive.getvalue()]))
    assert [a["path"] for a in out.artifacts] == ["dist/report.txt"]
    Run.objects.filter(pk=run.pk).update(artifacts=out.artifacts)
    run.refresh_from_db()
    with artifacts.open_artifact(run, "dist/report.txt") as kept:
        assert kept.read() == b"ok\n"
    assert not (Path(settings.DATA_DIR) / "artifacts" / artifacts.folder_of(run.public_id)).exists()
    # Kept again from the start when its outputs are read again; gone at retention.
    artifacts.remove_all(run.public_id)
    assert not artifacts.storage().exists(f"{artifacts.folder_of(run.public_id)}/dist/report.txt")
