"""A write from an older commit never silently reverts anyone's change (issue 26, item
4): through the editor's save door and the API's write doors, changes in separate places
are merged, an overlap is refused with what would be lost, and overwriting takes only
the overlapping lines, after they were shown."""

import base64

import pytest

from accounts.access import Actor
from tests.support.api import Api, assert_error
from workspaces import history
from workspaces.models import Workspace
from workspaces.store import author_of, open_store

PAGE = "/t/team-a/w/shop/"
LINES = [f"line {i}\n" for i in range(1, 13)]
TEXT = "".join(LINES)


def edit(text: str, **lines: str) -> str:
    """`text` with line N replaced (`l3="..."`), by 1-based number."""
    out = text.splitlines(keepends=True)
    for name, value in lines.items():
        out[int(name[1:]) - 1] = value
    return "".join(out)


@pytest.fixture
def agent(client, cast):
    _, secret = cast.token(cast.bob)
    return Api(client, secret)


@pytest.fixture
def shop(agent):
    r = agent.post("/workspaces", {"name": "Shop", "template": "python-http"})
    assert r.status_code == 201, r.content
    r = agent.put("/workspaces/shop/files/notes.txt", {"content": TEXT})
    assert r.status_code == 200, r.content
    return r.json()["commit"]


@pytest.fixture
def carol(signed_in, cast):
    return signed_in(cast.carol)


def head() -> str:
    with open_store(Workspace.objects.get(slug="shop")) as store:
        sha = store.branch_head("main")
    assert sha
    return sha


def file_at(sha: str, path: str = "notes.txt") -> str:
    with open_store(Workspace.objects.get(slug="shop")) as store:
        return history.read_file(store, sha, path)["content"]


def save(client, content: str, base: str, path: str = "notes.txt", **more):
    return client.post(
        f"{PAGE}save/",
        {"path": path, "content": content, "branch": "main", "base_commit": base, **more},
        content_type="application/json",
    )


def test_a_save_from_an_older_commit_merges_a_change_made_elsewhere_in_the_file(agent, carol, shop):
    # Bob's agent changes line 2 while carol edits line 10 of the version she opened.
    theirs = agent.put(
        "/workspaces/shop/files/notes.txt",
        {"content": edit(TEXT, l2="line 2, bob's\n"), "base_commit": shop},
    ).json()["commit"]
    r = save(carol, edit(TEXT, l10="line 10, carol's\n"), shop)
    assert r.status_code == 200, r.content
    answer = r.json()
    both = edit(TEXT, l2="line 2, bob's\n", l10="line 10, carol's\n")
    assert answer["merged"] is True and answer["content"] == both
    assert answer["parent"] == theirs and head() == answer["commit"]
    assert file_at(answer["commit"]) == both
    with open_store(Workspace.objects.get(slug="shop")) as store:
        assert answer["blob"] == store.lookup(answer["commit"], "notes.txt")[1].decode()


def test_an_overlapping_save_is_refused_with_what_it_would_lose_and_nothing_changes(
    agent, carol, shop
):
    agent.put(
        "/workspaces/shop/files/notes.txt",
        {"content": edit(TEXT, l2="line 2, bob's\n", l5="line 5, bob's\n"), "base_commit": shop},
    )
    before = head()
    r = save(carol, edit(TEXT, l5="line 5, carol's\n"), shop)
    error = assert_error(r, 409, "conflict")
    assert "reload" in error["message"]
    details = error["details"]
    assert details["head"] == before and details["base_commit"] == shop
    assert details["paths"] == ["notes.txt"]
    [lost] = details["files"]
    assert lost["why"] == "both_changed" and "same places" in lost["message"]
    # Theirs at that place would be lost (-), carol's would take it (+), with context.
    assert "-line 5, bob's\n+line 5, carol's\n" in lost["diff"]
    assert " line 4\n" in lost["diff"] and " line 6\n" in lost["diff"]
    assert "line 2" not in lost["diff"]  # a change elsewhere is not at stake
    assert head() == before and "line 5, bob's" in file_at(before)


def test_overwriting_takes_only_the_overlapping_lines_and_only_of_the_head_that_was_seen(
    agent, carol, shop
):
    agent.put(
        "/workspaces/shop/files/notes.txt",
        {"content": edit(TEXT, l2="line 2, bob's\n", l5="line 5, bob's\n"), "base_commit": shop},
    )
    seen = head()
    mine = edit(TEXT, l5="line 5, carol's\n")
    assert save(carol, mine, shop).status_code == 409
    # Bob changes another place again before carol chooses: her choice was of `seen`.
    later = agent.put(
        "/workspaces/shop/files/notes.txt",
        {"content": edit(file_at(seen), l5="line 5, bob's again\n"), "base_commit": seen},
    ).json()["commit"]
    r = save(carol, mine, shop, overwrite=seen)
    error = assert_error(r, 409, "conflict")
    assert (
        error["details"]["head"] == later and "bob's again" in error["details"]["files"][0]["diff"]
    )

    r = save(carol, mine, shop, overwrite=later)
    assert r.status_code == 200, r.content
    # Her line 5; bob's line 2 kept: only the overlapping place was overwritten.
    assert file_at(head()) == edit(TEXT, l2="line 2, bob's\n", l5="line 5, carol's\n")
    assert r.json()["merged"] is True


def test_a_file_deleted_meanwhile_is_an_overlap_and_can_be_recreated(agent, carol, shop):
    gone = agent.delete("/workspaces/shop/files/notes.txt").json()["commit"]
    mine = edit(TEXT, l1="mine\n")
    error = assert_error(save(carol, mine, shop), 409, "conflict")
    assert error["details"]["files"][0]["why"] == "deleted"
    r = save(carol, mine, shop, overwrite=gone)
    assert r.status_code == 200 and file_at(head()) == mine


def test_the_api_write_door_merges_from_its_base_commit(agent, shop):
    agent.put(
        "/workspaces/shop/files/notes.txt",
        {"content": edit(TEXT, l1="first, theirs\n"), "base_commit": shop},
    )
    r = agent.put(
        "/workspaces/shop/files/notes.txt",
        {"content": edit(TEXT, l12="last, mine\n"), "base_commit": shop},
    )
    assert r.status_code == 200, r.content
    assert r.json()["merged"] == ["notes.txt"]
    assert file_at(head()) == edit(TEXT, l1="first, theirs\n", l12="last, mine\n")
    # Without a base the write is the head's new content, as it always was.
    r = agent.put("/workspaces/shop/files/notes.txt", {"content": "plain\n"})
    assert r.status_code == 200 and r.json()["merged"] == [] and file_at(head()) == "plain\n"


def test_a_stale_commit_keeps_what_the_branch_got_in_other_files(agent, shop):
    theirs = agent.put(
        "/workspaces/shop/files/app.py", {"content": "print('theirs')\n", "base_commit": shop}
    ).json()["commit"]
    r = agent.post(
        "/workspaces/shop/commits",
        {
            "message": "Mine, from the old base",
            "base_commit": shop,
            "changes": [
                {"op": "write", "path": "notes.txt", "content": edit(TEXT, l3="mine\n")},
                {"op": "write", "path": "new.txt", "content": "new\n"},
            ],
        },
    )
    assert r.status_code == 201, r.content
    assert r.json()["parent"] == theirs and r.json()["merged"] == []
    assert file_at(head(), "app.py") == "print('theirs')\n"
    assert file_at(head(), "new.txt") == "new\n"


@pytest.mark.parametrize("op", ["delete", "rename"])
def test_deleting_or_renaming_a_file_changed_meanwhile_is_a_conflict(agent, shop, op):
    agent.put("/workspaces/shop/files/notes.txt", {"content": TEXT + "more\n", "base_commit": shop})
    before = head()
    change = {"op": op, "path": "notes.txt", **({"to": "moved.txt"} if op == "rename" else {})}
    r = agent.post(
        "/workspaces/shop/commits", {"message": op, "base_commit": shop, "changes": [change]}
    )
    error = assert_error(r, 409, "conflict")
    assert error["details"]["files"] == [
        {
            "path": "notes.txt",
            "why": "changed",
            "message": "changed on the branch since the base commit",
            "diff": "",
        }
    ]
    assert head() == before


def test_binary_files_both_changed_are_not_merged(agent, shop):
    data = base64.b64encode(b"\0\1\2" * 10).decode()
    first = agent.put(
        "/workspaces/shop/files/logo.bin", {"content": data, "encoding": "base64"}
    ).json()["commit"]
    agent.put(
        "/workspaces/shop/files/logo.bin",
        {"content": base64.b64encode(b"\0theirs").decode(), "encoding": "base64"},
    )
    r = agent.put(
        "/workspaces/shop/files/logo.bin",
        {
            "content": base64.b64encode(b"\0mine").decode(),
            "encoding": "base64",
            "base_commit": first,
        },
    )
    error = assert_error(r, 409, "conflict")
    assert error["details"]["files"][0]["why"] == "not_text"


def test_a_base_the_branch_never_reached_is_a_conflict(agent, cast, shop):
    # In the store, as a refused push leaves its objects, but on no branch.
    with open_store(Workspace.objects.get(slug="shop")) as store:
        tree = store.commit(shop).tree
        orphan = store.make_commit(tree, [], author_of(Actor(cast.alice)), "unreachable")
    r = agent.put("/workspaces/shop/files/notes.txt", {"content": "x\n", "base_commit": orphan})
    error = assert_error(r, 409, "conflict")
    assert "does not have" in error["message"] and file_at(head()) == TEXT


def test_a_new_file_from_a_stale_page_is_made_on_the_head_and_empties_nothing(carol, agent, shop):
    agent.put("/workspaces/shop/files/later.txt", {"content": "theirs\n"})
    r = carol.post(
        f"{PAGE}files/new/",
        {"path": "later.txt", "branch": "main", "base_commit": shop},
        HTTP_HX_REQUEST="true",
    )
    assert r.status_code == 409 and "already exists" in r.content.decode()
    r = carol.post(
        f"{PAGE}files/new/",
        {"path": "fresh.txt", "branch": "main", "base_commit": shop},
        HTTP_HX_REQUEST="true",
    )
    assert r.status_code == 200 and file_at(head(), "fresh.txt") == ""
    assert file_at(head(), "later.txt") == "theirs\n"


def test_the_branch_state_says_what_became_of_open_files(agent, carol, shop):
    agent.post(
        "/workspaces/shop/commits",
        {
            "message": "Tidy",
            "changes": [
                {"op": "write", "path": "notes.txt", "content": edit(TEXT, l1="changed\n")},
                {"op": "rename", "path": "README.md", "to": "docs/README.md"},
                {"op": "delete", "path": "test_app.py"},
            ],
        },
    )
    paths = ["notes.txt", "README.md", "test_app.py", "app.py"]
    query = "&".join(f"path={p}" for p in paths)
    r = carol.get(f"{PAGE}files/state/?ref=main&base={shop}&{query}&open=notes.txt")
    assert r.status_code == 200, r.content
    state = r.json()
    assert state["head"] == head() and state["moved"] is True
    files = state["files"]
    assert files["notes.txt"]["state"] == "changed"
    assert files["notes.txt"]["by"]["title"] == "Tidy" and files["notes.txt"]["by"]["author"]
    assert files["README.md"] == {**files["README.md"], "state": "renamed", "to": "docs/README.md"}
    assert files["test_app.py"]["state"] == "deleted" and files["app.py"]["state"] == "same"
    assert state["open"]["content"] == edit(TEXT, l1="changed\n")
    r = carol.get(f"{PAGE}files/state/?ref=main&base=nope")
    assert r.status_code == 422 and r.json()["error"]["message"]


def test_a_base_commit_that_is_no_sha_is_refused_on_every_write_door(agent, shop):
    r = agent.delete("/workspaces/shop/files/notes.txt?base_commit=null")
    error = assert_error(r, 422, "invalid")
    assert error["details"] == {"field": "base_commit"} and file_at(head()) == TEXT
