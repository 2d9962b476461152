"""A session's own changes, listed with a diff and committed on its branch by a three-way
merge with what the branch got meanwhile: a file both changed is refused (typed, with
its path), and a commit of the session's never undoes the branch's change. Through the
API and through MCP (write_files, exec, commit_session_changes), with a file holding a
granted secret's value withheld. Real stack, both runtimes."""

import base64

import pytest

from accounts.access import Actor
from runs.secret_actions import set_secret
from tests.support.mcp import Agent, connect
from tests.support.sessions import SessionAgent, follower

pytestmark = pytest.mark.docker

RUNTIMES = ["runc", "gvisor"]
VALUE = "sk-live-4f9a2c7e1b"


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_committing_the_sessions_changes_merges_and_never_reverts_the_branch(agent, runtime):
    session = agent.ready(runtime=runtime)
    sid = session["id"]
    original = agent.branch_file("app.py")
    agent.exec(session, "printf 'draft\\n' > notes.md && echo '# from the session' >> app.py")
    # The branch moves on a file the session left alone: the session gets it, and its
    # own changes stay its own.
    agent.write("README.md", "From the branch\n")

    listed = agent.get(f"/sessions/{sid}/changes")
    assert listed.status_code == 200, listed.content
    changes = listed.json()["changes"]
    assert (changes["added"], changes["modified"], changes["deleted"]) == (
        ["notes.md"],
        ["app.py"],
        [],
    )
    assert "+# from the session" in changes["diff"] and "+draft" in changes["diff"]
    assert listed.json()["base_commit"] == agent.session(session)["base_commit"]

    # The branch changes app.py too: the session keeps its copy (a conflict) ...
    theirs = original + "# from the branch\n"
    assert follower(agent.write("app.py", theirs), session)["state"] == "conflict"
    # ... and committing everything is refused, typed, naming it; nothing is written.
    branches = agent.get("/workspaces/shop/branches").json()
    refused = agent.post(f"/sessions/{sid}/commit", {"message": "All my work"})
    assert refused.status_code == 409, refused.content
    error = refused.json()["error"]
    assert error["code"] == "merge_conflict" and error["details"]["paths"] == ["app.py"]
    assert agent.branch_file("app.py") == theirs
    assert agent.get("/workspaces/shop/branches").json() == branches

    # The new file alone merges onto the branch's head, next to what the branch got.
    done = agent.post(f"/sessions/{sid}/commit", {"message": "Notes", "paths": ["notes.md"]})
    assert done.status_code == 201, done.content
    body = done.json()
    assert body["files"] == ["notes.md"] and body["withheld"] == []
    assert follower(body, session)["state"] == "applied"
    assert agent.branch_file("notes.md") == "draft\n"
    assert agent.branch_file("app.py") == theirs
    assert agent.branch_file("README.md") == "From the branch\n"
    commit = agent.get(f"/workspaces/shop/commits/{body['commit']}").json()
    assert commit["parents"] == [body["parent"]] and commit["title"] == "Notes"

    # The session puts app.py back as it was before its edit: its copy is now older than
    # the branch's, and committing everything keeps the branch's — never a revert.
    encoded = base64.b64encode(original.encode()).decode()
    agent.exec(session, f"echo {encoded} | base64 -d > app.py && echo more >> notes.md")
    merged = agent.post(f"/sessions/{sid}/commit", {"message": "More notes"})
    assert merged.status_code == 201, merged.content
    assert merged.json()["files"] == ["notes.md"]
    assert agent.branch_file("app.py") == theirs
    assert agent.branch_file("notes.md") == "draft\nmore\n"

    # Nothing left to commit is said so, typed.
    empty = agent.post(f"/sessions/{sid}/commit", {"paths": ["notes.md"]})
    assert empty.status_code == 422 and empty.json()["error"]["code"] == "no_changes"


def test_a_token_that_cannot_write_cannot_commit_a_sessions_changes(agent, client, cast):
    session = agent.ready()
    _, secret = cast.token(cast.carol, ["workspace:read", "run"])
    reader = SessionAgent(client, secret)
    r = reader.post(f"/sessions/{session['id']}/commit", {"message": "mine"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "missing_scope"
    # Another team's session is not there at all.
    _, other = cast.token(cast.charlie, ["workspace:read", "workspace:write", "run"])
    stranger = SessionAgent(client, other)
    assert stranger.get(f"/sessions/{session['id']}/changes").status_code == 404


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_an_agent_on_mcp_writes_sees_and_commits_with_a_secret_withheld(
    berth_server, run_stack, cast, shop, runtime
):
    set_secret(shop, Actor(cast.alice), "STRIPE_KEY", VALUE)
    _, secret = cast.token(
        cast.carol, ["workspace:read", "workspace:write", "run"], secret_names=["STRIPE_KEY"]
    )

    async def body(agent: Agent) -> None:
        opened = await agent("open_session", workspace="shop", runtime=runtime, wait_seconds=120)
        assert opened["state"] == "ready", opened
        sid = opened["id"]

        wrote = await agent(
            "write_files",
            workspace="shop",
            message="Notes",
            changes=[{"op": "write", "path": "notes.md", "content": "via mcp\n"}],
        )
        assert [(f["id"], f["state"]) for f in wrote["followers"]] == [(sid, "applied")]
        seen = await agent("exec", session=sid, command="cat notes.md")
        assert [line["text"] for line in seen["output"]] == ["via mcp"]

        await agent(
            "exec",
            session=sid,
            command='echo "key=$STRIPE_KEY" > leak.txt && echo report > report.md',
            secrets=["STRIPE_KEY"],
        )
        committed = await agent("commit_session_changes", session=sid, message="Report")
        assert committed["files"] == ["report.md"]
        assert committed["withheld"] == [{"path": "leak.txt", "secrets": ["STRIPE_KEY"]}]
        assert committed["commit"][:12] in committed["next"]

        # An overlap is refused through MCP too, with the error object and the paths.
        await agent("exec", session=sid, command="echo '# mine' >> app.py")
        original = await agent("read_file", workspace="shop", path="app.py")
        await agent(
            "write_files",
            workspace="shop",
            message="Theirs",
            changes=[
                {"op": "write", "path": "app.py", "content": original["content"] + "# theirs\n"}
            ],
        )
        error = await agent.error("commit_session_changes", session=sid)
        assert error["code"] == "merge_conflict" and error["details"]["paths"] == ["app.py"]
        await agent("close_session", session=sid, delete=True)

    connect(berth_server, secret, body)


def test_a_tracked_file_in_an_ignored_folder_is_neither_listed_deleted_nor_lost(agent):
    agent.write(".gitignore", "build/\n")
    agent.write("build/keep.txt", "tracked on purpose\n")
    session = agent.ready()
    agent.exec(session, "echo new > new.txt && mkdir -p build && echo junk > build/junk.o")
    listed = agent.get(f"/sessions/{session['id']}/changes").json()["changes"]
    assert (listed["added"], listed["deleted"]) == (["new.txt"], [])
    done = agent.post(f"/sessions/{session['id']}/commit", {"message": "new"})
    assert done.status_code == 201, done.content
    assert done.json()["files"] == ["new.txt"]
    assert agent.branch_file("build/keep.txt") == "tracked on purpose\n"
