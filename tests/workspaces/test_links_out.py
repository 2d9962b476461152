"""A symlink whose relative target climbs out of the tree is refused at every door that
makes a commit (docs/security.md 33): a push (the real git binary), the file API (a
folder rename that lifts a link above what it named) and Berth's own commits; an
absolute target, or a relative one that stays inside, is fine."""

import os

import pytest

from accounts.access import Actor
from tests.support.api import bearer
from tests.support.git import git, url
from workspaces import actions
from workspaces.changes import Change, TreeEditor
from workspaces.paths import LinkOutsideTree, link_climbs_out
from workspaces.store import author_of, open_store


@pytest.fixture
def shop(cast):
    return actions.create_workspace(cast.team_a, Actor(cast.carol), "Shop", "shop", "python-http")


def test_which_links_climb_out():
    assert link_climbs_out("x", "../etc/passwd")
    assert link_climbs_out("a/x", "../../etc/passwd")
    assert link_climbs_out("a/x", "b/../../../y")
    # Out and back in is out: the root's own name is not the tree's to know.
    assert link_climbs_out("x", "../shop/app.py")
    assert not link_climbs_out("a/x", "../app.py")
    assert not link_climbs_out("a/b/x", "../../app.py")
    assert not link_climbs_out("x", "/etc/passwd")  # the engine keeps it inside
    assert not link_climbs_out("x", "./app.py")


def test_a_push_with_a_link_out_of_the_tree_is_refused_and_names_it(
    berth_server, cast, shop, tmp_path
):
    _, secret = cast.token(cast.carol, ["workspace:read", "workspace:write"])
    git("clone", url(berth_server, secret), "work", cwd=tmp_path)
    work = tmp_path / "work"
    with open_store(shop) as store:
        before = store.branch_head("main")
    (work / "docs").mkdir()
    os.symlink("../../etc/passwd", work / "docs" / "passwd")
    git("add", "-A", cwd=work)
    git("commit", "-m", "a link out", cwd=work)
    result = git("push", "origin", "main", cwd=work, check=False)
    assert result.returncode != 0 and "[remote rejected]" in result.stderr
    assert "docs/passwd is a symlink to '../../etc/passwd'" in result.stderr
    assert "climbs out of the workspace" in result.stderr
    with open_store(shop) as store:
        assert store.branch_head("main") == before

    # Pointed inside, or at an absolute path, it is taken.
    os.remove(work / "docs" / "passwd")
    os.symlink("../app.py", work / "docs" / "app.py")
    os.symlink("/etc/passwd", work / "docs" / "passwd")
    git("add", "-A", cwd=work)
    git("commit", "--amend", "-m", "links that stay inside", cwd=work)
    git("push", "origin", "main", cwd=work)


def test_the_file_api_refuses_a_rename_that_lifts_a_link_out(client, cast, shop):
    # a/b/x -> ../../app.py names the root's app.py; moved to c/x, it names ../app.py.
    with open_store(shop) as store:
        head = store.branch_head("main")
        editor = TreeEditor(store, store.commit(head).tree)
        editor.apply(Change("symlink", "a/b/x", b"../../app.py"))
        sha = store.make_commit(editor.write(), [head], author_of(Actor(cast.carol)), "x")
        store.advance("main", head, sha)
    _, secret = cast.token(cast.carol, ["workspace:read", "workspace:write"])
    r = client.post(
        "/api/v1/workspaces/shop/folders/rename",
        {"path": "a/b", "to": "c"},
        content_type="application/json",
        **bearer(secret),
    )
    assert r.status_code == 422, r.content
    error = r.json()["error"]
    assert error["code"] == "link_outside_tree"
    assert error["details"] == {"path": "c/x", "target": "../../app.py"}
    with open_store(shop) as store:
        assert store.branch_head("main") == sha


def test_berths_own_commits_refuse_one_too(cast, shop):
    with open_store(shop) as store:
        head = store.branch_head("main")
        editor = TreeEditor(store, store.commit(head).tree)
        editor.apply(Change("symlink", "x", b"../secrets"))
        with pytest.raises(LinkOutsideTree):
            store.make_commit(editor.write(), [head], author_of(Actor(cast.carol)), "x")
