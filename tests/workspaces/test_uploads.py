"""The upload door behind the tree's drag and drop: the API's path and size rules, one
commit per batch, typed errors (the browser's side is in test_browser_folders.py)."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from tests.support.api import assert_error
from workspaces.models import Workspace
from workspaces.store import open_store

UPLOAD = "/t/team-a/w/shop/files/upload/"


@pytest.fixture
def carol(signed_in, cast):
    return signed_in(cast.carol)


@pytest.fixture
def shop(carol):
    r = carol.post("/t/team-a/", {"name": "Shop", "slug": "", "template": "python-http"})
    assert r.status_code == 302
    return Workspace.objects.get(slug="shop")


def head(workspace) -> str:
    with open_store(workspace) as store:
        sha = store.branch_head("main")
    assert sha
    return sha


def send(client, workspace, files, **fields):
    data = {"branch": "main", "base_commit": head(workspace), **fields, "files": files}
    return client.post(UPLOAD, data, HTTP_ACCEPT="application/json")


def test_a_batch_is_one_commit_in_the_folder_it_was_dropped_on(carol, shop):
    before = head(shop)
    files = [SimpleUploadedFile("a.txt", b"A\n"), SimpleUploadedFile("b.bin", bytes(range(256)))]
    r = send(carol, shop, files, folder="assets/img")
    assert r.status_code == 200, r.content
    assert r.json()["files"] == ["assets/img/a.txt", "assets/img/b.bin"]
    assert r.json()["url"] == "/t/team-a/w/shop/?ref=main&path=assets%2Fimg"
    with open_store(shop) as store:
        commit = store.commit(r.json()["commit"])
        assert commit.parents == [before.encode()]
        assert commit.message.decode().strip() == "Upload 2 files to assets/img"
        assert store.blob(store.lookup(r.json()["commit"], "assets/img/b.bin")[1]) == bytes(
            range(256)
        )


def test_a_file_past_the_cap_is_refused_whole_batch_and_all(carol, shop, settings):
    settings.WORKSPACE_MAX_FILE_BYTES = 1024
    before = head(shop)
    files = [SimpleUploadedFile("ok.txt", b"fine\n"), SimpleUploadedFile("big.bin", b"x" * 2048)]
    err = assert_error(send(carol, shop, files), 413, "file_too_large")
    assert err["details"] == {"path": "big.bin", "limit_bytes": 1024, "size_bytes": 2048}
    assert head(shop) == before


def test_a_body_past_the_request_cap_is_too_large(carol, shop, settings):
    settings.MAX_REQUEST_BODY = 4096
    assert_error(send(carol, shop, [SimpleUploadedFile("a.bin", b"x" * 8192)]), 413, "too_large")


@pytest.mark.parametrize(
    "folder, paths, code",
    [
        (".git", None, "invalid_path"),
        ("", ["../escape.txt"], "invalid_path"),
        ("docs", ["a\u202etxt.exe"], "invalid_path"),
        ("", ["same.txt", "same.txt"], "invalid"),
    ],
)
def test_paths_follow_the_workspace_rules(carol, shop, folder, paths, code):
    before = head(shop)
    files = [SimpleUploadedFile(f"f{i}.txt", b"x") for i in range(len(paths or [1]))]
    fields = {"folder": folder} | ({"paths": paths} if paths else {})
    assert_error(send(carol, shop, files, **fields), 422, code)
    assert head(shop) == before


@pytest.mark.parametrize("parser_cap", [100, 2])
def test_too_many_files_is_a_typed_refusal(carol, shop, settings, parser_cap):
    """Refused by the door's own count, or by Django's parser before it reads them."""
    settings.WORKSPACE_MAX_UPLOAD_FILES = 2
    settings.DATA_UPLOAD_MAX_NUMBER_FILES = parser_cap
    files = [SimpleUploadedFile(f"f{i}.txt", b"x") for i in range(3)]
    assert_error(send(carol, shop, files), 422, "too_many_files")


def test_another_team_cannot_upload(signed_in, cast, shop):
    r = send(signed_in(cast.charlie), shop, [SimpleUploadedFile("a.txt", b"x")])
    assert r.status_code == 404
