"""A session follows its branch: a write on any door (the API, a git push; MCP in
test_session_commit.py) answers once every ready session on the branch has it, so an
exec started after the answer sees it. A file the session changed too is left as the
session has it and reported; a frozen session gets the write on resume. Real stack,
both runtimes."""

import pytest
from django.conf import settings

from sessions.models import Session
from tests.support.git import git, url
from tests.support.servers import wait_for
from tests.support.sessions import follower, lines

pytestmark = pytest.mark.docker

RUNTIMES = ["runc", "gvisor"]
LIST = 'python3 -c "import os; [print(*sorted(os.listdir(d))) for d in %s]"'


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_write_is_seen_by_an_exec_right_after_its_answer(agent, runtime):
    session = agent.ready(runtime=runtime)

    written = agent.write("notes/today.md", "ship it\n")
    assert follower(written, session) == {
        "kind": "session",
        "id": session["id"],
        "state": "applied",
        "message": "applied: an exec started now sees it",
        "conflicts": [],
        # Absolute, so an agent can follow it as given (docs/security.md 38).
        "url": f"{settings.APP_URL}/t/team-a/w/shop/sessions/{session['id']}/",
    }
    assert agent.cat(session, "notes/today.md") == "ship it"
    # Written inside the sandbox, as the sandbox user: the session's own file.
    owner = agent.exec(session, "python3 -c \"import os; print(os.stat('notes/today.md').st_uid)\"")
    assert lines(owner) == ["1000"]

    # One commit of several changes: a deletion (its emptied folder goes too) and a move.
    r = agent.post(
        "/workspaces/shop/commits",
        {
            "message": "Tidy up",
            "changes": [
                {"op": "delete", "path": "notes/today.md"},
                {"op": "rename", "path": "README.md", "to": "docs/README.md"},
            ],
        },
    )
    assert r.status_code == 201, r.content
    assert follower(r.json(), session)["state"] == "applied"
    # (Python lists folders: coreutils' statx fails under this host's gVisor.)
    listing = lines(agent.exec(session, LIST % "('.', 'docs')"))
    assert listing == [
        ".gitignore app.py docs requirements.txt test_app.py workspace.toml",
        "README.md",
    ]
    assert agent.cat(session, "README.md") == "<absent>"
    assert agent.session(session)["base_commit"] == r.json()["commit"]

    # The dependency cache is keyed by requirements.txt ([setup] cache_key): a change to
    # another file leaves /deps as it is, a change to it makes /deps stale.
    assert agent.session(session)["deps_stale"] is False
    agent.write("requirements.txt", "# no dependencies yet\n")
    assert agent.session(session)["deps_stale"] is True


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_file_the_session_changed_too_is_reported_and_never_overwritten(agent, runtime):
    session = agent.ready(runtime=runtime)
    agent.exec(session, "echo '# tried in the session' >> app.py && rm test_app.py")
    mine = agent.cat(session, "app.py")

    r = agent.post(
        "/workspaces/shop/commits",
        {
            "message": "Both at once",
            "changes": [
                {"op": "write", "path": "app.py", "content": "print('the branch')\n"},
                {"op": "write", "path": "test_app.py", "content": "def test_it(): pass\n"},
                {"op": "write", "path": "README.md", "content": "From the branch\n"},
            ],
        },
    )
    assert r.status_code == 201, r.content
    said = follower(r.json(), session)
    assert said["state"] == "conflict"
    assert said["conflicts"] == [
        {"path": "app.py", "why": "changed in the session"},
        {"path": "test_app.py", "why": "deleted in the session"},
    ]
    assert "nothing overwritten" in said["message"]

    # Nothing of the session's was overwritten or brought back; the rest was applied.
    assert agent.cat(session, "app.py") == mine
    assert agent.cat(session, "test_app.py") == "<absent>"
    assert agent.cat(session, "README.md") == "From the branch"
    assert agent.session(session)["conflicts"] == ["app.py", "test_app.py"]

    # A folder the session made a symlink is never followed: nothing lands outside.
    made = agent.exec(
        session,
        "mkdir /tmp/elsewhere && python3 -c \"import os; os.symlink('/tmp/elsewhere', 'docs')\"",
    )
    assert made["exit_code"] == 0, made["output"]
    said = follower(agent.write("docs/guide.md", "# Guide\n"), session)
    assert said["conflicts"] == [
        {"path": "docs/guide.md", "why": "a folder on its path is a symlink"}
    ]
    assert agent.cat(session, "/tmp/elsewhere/guide.md") == "<absent>"

    # A later write the session already matches settles that file.
    agent.exec(session, "printf 'def test_it(): assert True\\n' > test_app.py")
    again = agent.write("test_app.py", "def test_it(): assert True\n")
    assert follower(again, session)["state"] == "applied"
    assert agent.session(session)["conflicts"] == ["app.py", "docs/guide.md"]


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_frozen_session_gets_the_write_on_resume(agent, runtime):
    session = agent.ready(runtime=runtime, idle_freeze_s=1)
    # Looked at in the database: asking the API is activity, which keeps it awake.
    wait_for(
        lambda: Session.objects.get(public_id=session["id"]).state == "frozen",
        60,
        what="the session to freeze",
    )

    said = follower(agent.write("notes.md", "written while it slept\n"), session)
    assert (said["state"], said["message"]) == ("frozen", "frozen: applied on resume")
    # The exec resumes it, and the write is applied before the exec runs.
    assert agent.cat(session, "notes.md") == "written while it slept"
    assert agent.session(session)["state"] in ("ready", "freezing", "frozen")


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_stopped_session_gets_the_branch_at_its_next_start(agent, runtime):
    session = agent.ready(runtime=runtime)
    agent.exec(session, "echo kept > mine.txt")
    assert agent.post(f"/sessions/{session['id']}/stop").status_code == 202
    agent.wait_state(session, "stopped")

    # Nothing live follows the branch: the write answers at once.
    assert agent.write("notes.md", "written while it was stopped\n")["followers"] == []
    assert agent.post(f"/sessions/{session['id']}/start").status_code == 202
    assert agent.wait_state(session, "ready", "failed")["state"] == "ready"
    assert agent.cat(session, "notes.md") == "written while it was stopped"
    assert agent.cat(session, "mine.txt") == "kept"


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_git_push_reaches_the_session_before_it_answers(
    agent, berth_server, cast, tmp_path, runtime
):
    session = agent.ready(runtime=runtime)
    _, secret = cast.token(cast.carol, ["workspace:read", "workspace:write"])
    git("clone", url(berth_server, secret), "work", cwd=tmp_path)
    work = tmp_path / "work"
    (work / "pushed.txt").write_text("from git\n")
    (work / "app.py").write_text("print('pushed')\n")
    git("add", ".", cwd=work)
    git("commit", "-m", "Pushed", cwd=work)
    pushed = git("push", "origin", "main", cwd=work)

    # git prints what each session following the branch did, as a hook's output, with
    # the session's page as a full URL (docs/security.md 38).
    assert f"remote: session {session['id']}: applied" in pushed.stderr
    page = f"{settings.APP_URL}/t/team-a/w/shop/sessions/{session['id']}/"
    assert f"({page})" in pushed.stderr
    assert agent.cat(session, "pushed.txt") == "from git"
    assert agent.cat(session, "app.py") == "print('pushed')"
    head = git("rev-parse", "HEAD", cwd=work).stdout.strip()
    assert agent.session(session)["base_commit"] == head
