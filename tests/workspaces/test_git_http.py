"""Plain `git` against Berth's smart HTTP: clone, commit, push, pull."""

import os
import subprocess

import pytest

from accounts.access import Actor
from tests.support.git import git, url
from workspaces import actions


@pytest.fixture
def shop(cast):
    return actions.create_workspace(cast.team_a, Actor(cast.carol), "Shop", "shop", "python-http")


def test_clone_commit_push_and_pull_with_plain_git(berth_server, cast, shop, tmp_path):
    _, secret = cast.token(cast.carol, ["workspace:read", "workspace:write"])
    git("clone", url(berth_server, secret), "work", cwd=tmp_path)
    work = tmp_path / "work"
    assert (work / "app.py").read_text().startswith('"""A tiny web app')
    (work / "NOTES.md").write_text("pushed with git\n")
    git("add", "NOTES.md", cwd=work)
    git("commit", "-m", "Add notes", cwd=work)
    git("push", "origin", "main", cwd=work)
    from workspaces import history
    from workspaces.store import open_store

    with open_store(shop) as store:
        head = store.branch_head("main")
        assert history.read_file(store, head, "NOTES.md")["content"] == "pushed with git\n"
        assert history.commit_summary(store, head)["title"] == "Add notes"
    pushed = cast.team_a.activity.get(verb="git.pushed")
    assert pushed.token is not None and pushed.user == cast.carol
    actions.commit_changes(
        shop, Actor(cast.carol), [actions.Change("write", "api.txt", b"from the API\n")], "API edit"
    )
    git("pull", "--ff-only", cwd=work)
    assert (work / "api.txt").read_text() == "from the API\n"


def test_anonymous_git_gets_401_with_a_challenge(berth_server, cast, shop, tmp_path):
    import urllib.error
    import urllib.request

    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(
            f"{berth_server.url}/git/team-a/shop.git/info/refs?service=git-upload-pack", timeout=10
        )
    assert e.value.code == 401
    assert e.value.headers["WWW-Authenticate"].startswith("Basic")
    result = git("clone", f"{berth_server.url}/git/team-a/shop.git", "x", cwd=tmp_path, check=False)
    assert result.returncode != 0 and not (tmp_path / "x").exists()


def test_only_the_smart_protocol_is_served_never_an_object_by_its_path(
    berth_server, cast, shop, tmp_path
):
    """The dumb protocol's paths hand out any stored object by id, reachable or not (a
    refused push's, a run's unpublished tree): they are not served."""
    import base64
    import urllib.error
    import urllib.request

    _, secret = cast.token(cast.carol, ["workspace:read"])
    auth = "Basic " + base64.b64encode(f"x:{secret}".encode()).decode()
    from workspaces.store import open_store

    with open_store(shop) as store:
        head = store.branch_head("main")
        tree = store.commit(head).tree.decode()
    base = f"{berth_server.url}/git/team-a/shop.git"
    for path in (
        f"objects/{tree[:2]}/{tree[2:]}",
        f"objects/{head[:2]}/{head[2:]}",
        "objects/info/packs",
        "info/refs",
        "HEAD",
        "info/refs?service=git-x",
    ):
        request = urllib.request.Request(f"{base}/{path}", headers={"Authorization": auth})
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(request, timeout=10)
        assert e.value.code == 404, path
        assert b"smart HTTP protocol only" in e.value.read()
    git("clone", url(berth_server, secret), "work", cwd=tmp_path)  # the smart door works


def test_a_read_only_token_can_clone_but_not_push(berth_server, cast, shop, tmp_path):
    _, secret = cast.token(cast.carol, ["workspace:read"])
    git("clone", url(berth_server, secret), "work", cwd=tmp_path)
    work = tmp_path / "work"
    (work / "x.txt").write_text("x")
    git("add", ".", cwd=work)
    git("commit", "-m", "x", cwd=work)
    result = git("push", "origin", "main", cwd=work, check=False)
    assert result.returncode != 0
    assert "x.txt" not in _files_at_head(shop)


def test_charlie_cannot_see_team_as_repository(berth_server, cast, shop, tmp_path):
    _, secret = cast.token(cast.charlie)
    result = git("clone", url(berth_server, secret), "x", cwd=tmp_path, check=False)
    assert result.returncode != 0 and "not found" in result.stderr.lower()


def _files_at_head(workspace) -> set[str]:
    from workspaces.store import open_store

    with open_store(workspace) as store:
        head = store.branch_head("main")
        assert head
        return {e["name"] for e in store.list_dir(head, "")}


@pytest.mark.parametrize("name", [".git", ".GIT", "..", "invoice\u202etxt.exe", "a\u200bb"])
def test_a_push_of_a_tree_with_a_forbidden_name_is_refused(
    berth_server, cast, shop, tmp_path, name
):
    _, secret = cast.token(cast.carol)
    work = tmp_path / "craft"
    git("clone", url(berth_server, secret), str(work), cwd=tmp_path)
    blob = subprocess.run(
        ["git", "hash-object", "-w", "--stdin"],
        cwd=work,
        input="x\n",
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    inner = subprocess.run(
        ["git", "mktree"],
        cwd=work,
        input=f"100644 blob {blob}\tconfig\n",
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # mktree refuses these names itself; write the tree object by hand.
    entry = b"40000 " + name.encode() + b"\0" + bytes.fromhex(inner)
    tree = (
        subprocess.run(
            ["git", "hash-object", "-w", "-t", "tree", "--literally", "--stdin"],
            cwd=work,
            input=entry,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .strip()
    )
    parent = git("rev-parse", "HEAD", cwd=work).stdout.strip()
    commit = git("commit-tree", tree, "-p", parent, "-m", "evil", cwd=work).stdout.strip()
    before = _files_at_head(shop)
    result = git("push", "origin", f"{commit}:refs/heads/main", cwd=work, check=False)
    assert result.returncode != 0
    assert "[remote rejected]" in result.stderr
    assert _files_at_head(shop) == before
    if not name.startswith("."):
        assert "invisible character" in result.stderr


def test_a_force_push_to_the_default_branch_is_refused(berth_server, cast, shop, tmp_path):
    _, secret = cast.token(cast.carol)
    git("clone", url(berth_server, secret), "work", cwd=tmp_path)
    work = tmp_path / "work"
    (work / "x.txt").write_text("x")
    git("add", ".", cwd=work)
    git("commit", "--amend", "-m", "rewritten", cwd=work)
    result = git("push", "--force", "origin", "main", cwd=work, check=False)
    assert result.returncode != 0 and "force-push" in result.stderr
    assert "x.txt" not in _files_at_head(shop)


def test_a_push_larger_than_the_cap_is_rejected_cleanly(berth_server, cast, shop, tmp_path):
    """The test server runs with GIT_MAX_PUSH_MB=5 (tests/support/servers.py)."""
    _, secret = cast.token(cast.carol)
    git("clone", url(berth_server, secret), "work", cwd=tmp_path)
    work = tmp_path / "work"
    (work / "big.bin").write_bytes(os.urandom(7 * 1024 * 1024))
    git("add", ".", cwd=work)
    git("commit", "-m", "big", cwd=work)
    result = git("push", "origin", "main", cwd=work, check=False)
    assert result.returncode != 0
    assert "big.bin" not in _files_at_head(shop)
    # The server lives on: a small push right after goes through.
    git("reset", "--hard", "origin/main", cwd=work)
    (work / "small.txt").write_text("ok")
    git("add", ".", cwd=work)
    git("commit", "-m", "small", cwd=work)
    git("push", "origin", "main", cwd=work)
    assert "small.txt" in _files_at_head(shop)


def test_an_admin_can_allow_force_pushes(berth_server, cast, shop, signed_in, tmp_path):
    r = signed_in(cast.carol).post(
        "/t/team-a/w/shop/settings/push-policy/", {"allow_force_push": "on"}
    )
    assert r.status_code == 403
    signed_in(cast.alice).post("/t/team-a/w/shop/settings/push-policy/", {"allow_force_push": "on"})
    _, secret = cast.token(cast.carol)
    git("clone", url(berth_server, secret), "work", cwd=tmp_path)
    work = tmp_path / "work"
    (work / "x.txt").write_text("x")
    git("add", ".", cwd=work)
    git("commit", "--amend", "-m", "rewritten", cwd=work)
    git("push", "--force", "origin", "main", cwd=work)
    assert "x.txt" in _files_at_head(shop)
    assert cast.team_a.activity.filter(verb="workspace.policy_changed").count() == 1
