"""A few kilobytes of Git objects can name billions of bytes: a tree that names one big
blob many times, or trees that each name the one below ten times. What a tree expands
to is counted with multiplicity (workspaces.treesize) on every door that makes a commit
— git push, the file API, MCP, a run's changes — and at hydration, so no Berth process
ever expands one; the peak memory of the worker, the agent and daphne stays bounded."""

import subprocess
import time
from pathlib import Path

import pytest
from dulwich.objects import Commit, Tree

from accounts.access import Actor
from tests.support.api import bearer
from tests.support.git import git, url
from tests.support.memory import PEAK_RSS_BOUND_MB, peak_rss_mb
from tests.support.runs import Agent, no_container_left
from workspaces import actions, treesize
from workspaces.gitstore import MODE_FILE, MODE_TREE
from workspaces.store import open_store

BLOB_MB = 4


@pytest.fixture
def shop(cast):
    return actions.create_workspace(cast.team_a, Actor(cast.carol), "Shop", "shop", "python-http")


def git_out(work: Path, *args: str, stdin: str | bytes = "") -> str:
    return (
        subprocess.run(
            ["git", *args],
            cwd=work,
            input=stdin.encode() if isinstance(stdin, str) else stdin,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .strip()
    )


def fan_out_with_git(work: Path, levels: int = 7) -> str:
    """`levels` tree objects, each naming the one below ten times: 10**levels paths."""
    blob = git_out(work, "hash-object", "-w", "--stdin", stdin="boom\n")
    tree = git_out(work, "mktree", stdin="".join(f"100644 blob {blob}\tf{i}\n" for i in range(10)))
    for _ in range(levels - 1):
        tree = git_out(
            work, "mktree", stdin="".join(f"040000 tree {tree}\td{i}\n" for i in range(10))
        )
    return tree


def blob_bomb_with_git(work: Path, names: int) -> str:
    """One BLOB_MB MB blob of zeros (a few kB packed) named `names` times."""
    blob = git_out(work, "hash-object", "-w", "--stdin", stdin=b"\0" * (BLOB_MB << 20))
    return git_out(
        work, "mktree", stdin="".join(f"100644 blob {blob}\tcopy{i:04}.bin\n" for i in range(names))
    )


def push_tree(work: Path, tree: str):
    parent = git("rev-parse", "HEAD", cwd=work).stdout.strip()
    commit = git("commit-tree", tree, "-p", parent, "-m", "bomb", cwd=work).stdout.strip()
    return git("push", "origin", f"{commit}:refs/heads/bomb", cwd=work, check=False)


def test_a_fan_out_bomb_push_is_refused_at_once(berth_server, cast, shop, tmp_path):
    _, secret = cast.token(cast.carol)
    git("clone", url(berth_server, secret), "work", cwd=tmp_path)
    work = tmp_path / "work"
    tree = fan_out_with_git(work)
    started = time.monotonic()
    result = push_tree(work, tree)
    took = time.monotonic() - started
    assert result.returncode != 0 and "[remote rejected]" in result.stderr
    assert "100,000 paths" in result.stderr
    # Seven objects read once each: far under a second of checking (the whole git round
    # trip is timed here, hence the margin); a walk of its 10**7 paths takes minutes.
    assert took < 10, took
    with open_store(shop) as store:
        assert "bomb" not in store.branches()


def test_one_blob_named_600_times_is_refused_on_push(berth_server, cast, shop, tmp_path):
    _, secret = cast.token(cast.carol)
    git("clone", url(berth_server, secret), "work", cwd=tmp_path)
    work = tmp_path / "work"
    result = push_tree(work, blob_bomb_with_git(work, 600))  # 2.4 GB from ~5 kB
    assert result.returncode != 0 and "2,048 MB" in result.stderr
    with open_store(shop) as store:
        assert "bomb" not in store.branches()
    assert peak_rss_mb(berth_server.pid) < PEAK_RSS_BOUND_MB


def test_the_file_api_refuses_a_commit_past_the_tree_caps(client, cast, shop, settings):
    """The caps are the same on every door; lowered here so a few files pass them."""
    settings.WORKSPACE_MAX_TREE_ENTRIES = 5
    _, secret = cast.token(cast.carol)
    head = client.get("/api/v1/workspaces/shop", **bearer(secret)).json()["head"]
    r = client.post(
        "/api/v1/workspaces/shop/commits",
        {
            "message": "many",
            "changes": [{"op": "write", "path": f"n/{i}.txt", "content": "x"} for i in range(6)],
        },
        content_type="application/json",
        **bearer(secret),
    )
    assert r.status_code == 422, r.content
    error = r.json()["error"]
    assert error["code"] == "tree_too_large" and error["details"]["max_entries"] == 5
    assert client.get("/api/v1/workspaces/shop", **bearer(secret)).json()["head"] == head


def test_the_check_reads_each_tree_object_once(cast, shop):
    """Seven objects, 10**7 paths: refused after seven reads, well under a second (a
    walk of every path would take minutes). Timed here, in the process, because the
    push's own round trip (above) is most of what its test waits for."""
    tree = fan_out(shop)
    treesize._MEMO.clear()
    with open_store(shop) as store:
        started = time.monotonic()
        with pytest.raises(treesize.TreeTooLarge):
            treesize.check_tree(store.repo.object_store, tree)
        assert time.monotonic() - started < 1


def older_commit(shop, tree):
    """A commit made before the caps existed: written straight into the store, on a
    branch of its own, the way an old repository might hold one."""
    with open_store(shop) as store:
        commit = Commit()
        commit.tree = tree
        commit.parents = [store.branch_head("main").encode()]
        commit.author = commit.committer = b"Old <old@example.com>"
        commit.author_time = commit.commit_time = 1_600_000_000
        commit.author_timezone = commit.commit_timezone = 0
        commit.message = b"from before the caps\n"
        store.repo.object_store.add_object(commit)
        store.repo.refs[b"refs/heads/old"] = commit.id
        return commit.id.decode()


def blob_bomb(shop, names):
    with open_store(shop) as store:
        blob = store.add_blob(b"\0" * (BLOB_MB << 20))
        tree = Tree()
        for i in range(names):
            tree.add(f"copy{i:04}.bin".encode(), MODE_FILE, blob)
        store.repo.object_store.add_object(tree)
        return tree.id


def fan_out(shop, levels=7):
    with open_store(shop) as store:
        below = store.add_blob(b"boom\n")
        mode = MODE_FILE
        for _ in range(levels):
            tree = Tree()
            for i in range(10):
                tree.add(f"d{i}".encode(), mode, below)
            store.repo.object_store.add_object(tree)
            below, mode = tree.id, MODE_TREE
        return below


@pytest.mark.docker
@pytest.mark.parametrize("bomb", ["blob", "fan-out"])
def test_an_older_commit_past_the_caps_ends_its_run_source_too_large(
    client, cast, shop, run_stack, bomb
):
    tree = blob_bomb(shop, 600) if bomb == "blob" else fan_out(shop)
    sha = older_commit(shop, tree)
    # It has no workspace.toml: it asks for the defaults, which are no widening of the
    # template's (docs/security.md 36), so nothing waits for a review.
    _, secret = cast.token(cast.carol)
    agent = Agent(client, secret)
    done = agent.wait(agent.run("echo never", ref=sha))
    assert (done["state"], done["reason"]) == ("failed", "source_too_large"), done
    assert "Nothing ran" in done["message"]
    assert "never" not in "\n".join(agent.output(done))
    assert no_container_left(done)  # nothing half-made
    for proc in (run_stack.worker.proc, run_stack.agent.proc):
        assert peak_rss_mb(proc.pid) < PEAK_RSS_BOUND_MB


@pytest.mark.docker
@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
def test_a_hard_link_bomb_written_by_a_run_cannot_be_committed(
    client, cast, shop, run_stack, berth_server, runtime
):
    """300 hard links to one 9 MB file take no disk, yet as a tree they are 2.7 GB."""
    _, secret = cast.token(cast.carol)
    agent = Agent(client, secret)
    done = agent.wait(
        agent.run(
            "head -c 9000000 /dev/urandom > big && for i in $(seq 300); do ln big l$i; done",
            commit_changes=True,
            runtime=runtime,
        )
    )
    assert done["state"] == "succeeded", done
    assert "past what a workspace may hold" in done["changes"]["error"]
    assert done["changes_commit"] is None
    r = client.post(f"/api/v1/runs/{done['id']}/commit-changes", **bearer(secret))
    assert r.status_code == 409 and r.json()["error"]["code"] == "no_changes"
    with open_store(shop) as store:
        assert set(store.branches()) == {"main"}
    assert no_container_left(done)
    for pid in (run_stack.worker.proc.pid, run_stack.agent.proc.pid, berth_server.pid):
        assert peak_rss_mb(pid) < PEAK_RSS_BOUND_MB
