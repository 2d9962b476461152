"""Reading a session's files never grows the workspace's Git store: each read keeps its
objects in a scratch store of its own on the web host (the session's host's agent sends
the files: sessions.reader), gone once a newer read is done, once it is older than
SESSION_READ_KEEP_S, with its session, or, left by a crash, at the web host's next
sweep; all of a host's sessions' together stay under SESSION_READS_MAX_MB. A commit
brings in only what its new commit needs. Real stack."""

import fcntl
import hashlib
import os
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from dulwich.objects import Blob, Tree
from dulwich.repo import Repo

from sessions import snapstore
from sessions.models import Snapshot
from sessions.tasks import sweep_reads
from tests.support.servers import wait_for
from tests.support.sessions import lines

pytestmark = pytest.mark.docker

WRITE = "python3 -c \"import os; open('%s', 'wb').write(os.urandom(%d << 20))\""


def store_figures(repo: Path) -> dict:
    """What a bare repository's object store holds on disk: loose objects and packs."""
    loose = [p for p in (repo / "objects").glob("[0-9a-f][0-9a-f]/*") if p.is_file()]
    packs = sorted((repo / "objects" / "pack").glob("*.pack"))
    return {
        "loose": len(loose),
        "loose_bytes": sum(p.stat().st_size for p in loose),
        "packs": [(p.name, p.stat().st_size) for p in packs],
    }


def object_ids(repo_path: Path) -> set[bytes]:
    repo = Repo(str(repo_path))
    try:
        return set(repo.object_store)
    finally:
        repo.close()


def tree_objects(repo: Repo, tree: bytes) -> set[bytes]:
    """Every tree and blob a tree names, itself included."""
    found, todo = set(), [tree]
    while todo:
        sha = todo.pop()
        found.add(sha)
        node = repo[sha]
        assert isinstance(node, Tree)
        for entry in node.iteritems():
            if entry.mode == 0o40000:
                todo.append(entry.sha)
            elif entry.mode != 0o160000:
                found.add(entry.sha)
    return found


def stores_of(session_id: str) -> list[Path]:
    return sorted((snapstore.host_dir() / session_id).glob("*.git"))


def size_of(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def test_asking_for_changes_again_and_again_leaves_the_workspaces_store_as_it_was(agent, shop):
    session = agent.ready(runtime="runc")
    sid = session["id"]
    before = store_figures(shop.repo_path)
    for _ in range(5):
        # The session rewrites a big file with new content, and is asked what changed.
        agent.exec(session, WRITE % ("big.bin", 4))
        r = agent.get(f"/sessions/{sid}/changes")
        assert r.status_code == 200, r.content
        assert r.json()["changes"]["added"] == ["big.bin"]
        assert store_figures(shop.repo_path) == before
        # The read before this one went once this one was done: one store, one file.
        stores = wait_for(
            lambda: stores_of(sid),
            10,
            what="the older read's store to go",
            until=lambda found: len(found) == 1,
        )
        assert size_of(stores[0]) < 5 << 20

    # A read older than SESSION_READ_KEEP_S goes with the web host's next sweep.
    Snapshot.objects.filter(session__public_id=sid).update(
        done_at=timezone.now() - timedelta(hours=1)
    )
    assert swept(lambda: not stores_of(sid))

    # A read that is there when its session is deleted goes with it.
    assert agent.get(f"/sessions/{sid}/changes").status_code == 200
    assert len(stores_of(sid)) == 1
    r = agent.client.delete(f"/api/v1/sessions/{sid}", **agent.headers)
    assert r.status_code == 202, r.content
    agent.wait_state(session, "deleted", timeout=60)
    wait_for(lambda: not stores_of(sid), 10, what="the deleted session's read to go")
    assert store_figures(shop.repo_path) == before


def test_a_commit_brings_into_the_store_only_what_its_commit_needs(agent, shop):
    session = agent.ready(runtime="runc")
    sid = session["id"]
    agent.exec(session, "mkdir -p data && " + WRITE % ("data/blob.bin", 1))
    agent.exec(session, "printf 'draft\\n' > notes.md && echo '# mine' >> app.py")
    agent.write("app.py", agent.branch_file("app.py") + "# theirs\n")
    ids = object_ids(shop.repo_path)

    # A refused commit (both changed app.py) adds nothing to the store.
    refused = agent.post(f"/sessions/{sid}/commit", {"message": "All of it"})
    assert refused.status_code == 409, refused.content
    assert refused.json()["error"]["code"] == "merge_conflict"
    assert object_ids(shop.repo_path) == ids

    done = agent.post(f"/sessions/{sid}/commit", {"message": "Data", "paths": ["data", "notes.md"]})
    assert done.status_code == 201, done.content
    commit = done.json()["commit"]
    assert sorted(done.json()["files"]) == ["data/blob.bin", "notes.md"]
    added = object_ids(shop.repo_path) - ids
    repo = Repo(str(shop.repo_path))
    try:
        new = repo[commit.encode()]
        # The commit, its root folder, `data`, and the two new files: nothing else.
        assert added == {new.id} | (tree_objects(repo, new.tree) - ids)
        assert len(added) == 5
        blob = repo[repo[repo[new.tree][b"data"][1]][b"blob.bin"][1]]
        assert isinstance(blob, Blob)
        digest = hashlib.sha256(blob.as_raw_string()).hexdigest()
    finally:
        repo.close()
    assert lines(agent.exec(session, "sha256sum data/blob.bin"))[0].split()[0] == digest
    assert agent.branch_file("notes.md") == "draft\n"
    assert agent.branch_file("app.py").endswith("# theirs\n")


def swept(done) -> bool:
    """The web host's sweep (beat, every minute: here at once), then whether `done`."""
    sweep_reads()
    return bool(done())


def test_a_store_a_crash_left_is_swept_and_one_a_door_reads_is_not(transactional_db):
    host = snapstore.host_dir()
    left = host / "crashedsession" / "0123456789abcdef.git"
    left.parent.mkdir(parents=True, exist_ok=True)
    Repo.init_bare(str(left), mkdir=True).close()
    (left / "objects" / "ab").mkdir()
    (left / "objects" / "ab" / ("0" * 38)).write_bytes(b"x" * 4096)
    # A lock of a store whose folder a crash kept from being made.
    orphan = host / "crashedsession" / "fedcba9876543210.lock"
    orphan.touch()
    # A door reading a store holds its lock shared (taken here before the store's
    # folder is made, as its writer does, so no sweep can come in between).
    held = host / "readsession" / "00112233aabbccdd.git"
    held.parent.mkdir(parents=True, exist_ok=True)
    lock = os.open(held.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_SH)
    try:
        Repo.init_bare(str(held), mkdir=True).close()
        assert swept(lambda: not left.exists() and not orphan.exists())
        assert held.is_dir()  # held: left for a later sweep
        with snapstore.opened(f"{host.name}/readsession/00112233aabbccdd") as store:
            assert store.repo.object_store is not None  # another door opens it too
    finally:
        os.close(lock)
    assert swept(lambda: not held.exists())  # the door let it go
    assert not (host / "crashedsession").exists() and not (host / "readsession").exists()


def test_a_read_past_the_hosts_bound_fails_typed_and_keeps_nothing(agent):
    session = agent.ready(runtime="runc")
    sid = session["id"]
    # Three 9 MB files new to the store: past SESSION_READS_MAX_MB (24 in tests).
    agent.exec(session, " && ".join(WRITE % (f"big{i}.bin", 9) for i in range(3)))
    r = agent.get(f"/sessions/{sid}/changes")
    assert r.status_code == 503, r.content
    error = r.json()["error"]
    assert error["code"] == "session_not_read" and "SESSION_READS_MAX_MB" in error["message"]
    wait_for(lambda: not stores_of(sid), 10, what="the failed read's store to go")

    agent.exec(session, "rm big0.bin big1.bin")
    r = agent.get(f"/sessions/{sid}/changes")
    assert r.status_code == 200, r.content
    assert r.json()["changes"]["added"] == ["big2.bin"]
