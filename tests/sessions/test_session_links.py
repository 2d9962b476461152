"""Symlinks out of the tree and sessions (docs/security.md 33): a session opens on an
older commit holding one (left out of its /workspace: its changes show it deleted), and
one an exec makes is never committed: the session's changes and its commit's answer
name it as skipped. Real
stack, both runtimes."""

import pytest

from tests.support.git import commit_bypassing_the_doors
from tests.support.sessions import SessionAgent, lines

pytestmark = pytest.mark.docker


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
def test_a_link_out_of_the_tree_never_reaches_a_commit_from_a_session(
    agent: SessionAgent, shop, runtime
):
    commit_bypassing_the_doors(shop, {"old": b"../outside"})
    session = agent.ready(runtime=runtime)
    assert "old" not in lines(agent.exec(session, "ls -A"))  # left out at hydration

    made = agent.exec(
        session,
        "mkdir -p docs && ln -s ../../etc/passwd docs/passwd && ln -s ../app.py docs/app.py "
        "&& echo hi > docs/notes.md",
    )
    assert made["exit_code"] == 0, made
    sid = session["id"]
    listed = agent.get(f"/sessions/{sid}/changes").json()["changes"]
    assert listed["added"] == ["docs/app.py", "docs/notes.md"]
    # Left out of its /workspace, the older link reads as deleted: a commit of
    # everything removes it from the branch (which no sandbox could hold), in sight.
    assert listed["deleted"] == ["old"]
    [skipped] = listed["skipped"]
    assert skipped["path"] == "docs/passwd" and "climbs out of /workspace" in skipped["why"]

    done = agent.post(f"/sessions/{sid}/commit", {"message": "docs"})
    assert done.status_code == 201, done.content
    body = done.json()
    assert body["files"] == ["docs/app.py", "docs/notes.md", "old"]
    assert [s["path"] for s in body["skipped"]] == ["docs/passwd"]
    tree = agent.get("/workspaces/shop/tree?path=docs").json()
    assert [e["name"] for e in tree["entries"]] == ["app.py", "notes.md"]
    root = agent.get("/workspaces/shop/tree").json()
    assert "old" not in [e["name"] for e in root["entries"]]
