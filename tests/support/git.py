"""Plain `git` against Berth's smart HTTP."""

import os
import subprocess
from pathlib import Path


def git(*args: str, cwd: Path | None = None, check: bool = True, **env: str):
    """Run the real git binary with no user config, prompts or credential helpers."""
    full_env = {
        **os.environ,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_CONFIG_NOSYSTEM": "1",
        "HOME": str(cwd or Path.cwd()),
        "GIT_AUTHOR_NAME": "Carol",
        "GIT_AUTHOR_EMAIL": "carol@example.com",
        "GIT_COMMITTER_NAME": "Carol",
        "GIT_COMMITTER_EMAIL": "carol@example.com",
        **env,
    }
    result = subprocess.run(
        ["git", *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=120
    )
    if check and result.returncode:
        raise AssertionError(f"git {' '.join(args)} failed:\n{result.stderr}")
    return result


def url(server, secret: str, team: str = "team-a", slug: str = "shop") -> str:
    host = server.url.removeprefix("http://")
    return f"http://x:{secret}@{host}/git/{team}/{slug}.git"


def commit_bypassing_the_doors(workspace, links: dict[str, bytes]) -> str:
    """A commit on `main` adding these symlinks, written with dulwich straight into the
    store as an older Berth (or a hand in the store) could have made it: no door's
    checks (workspaces.treesize.check_tree) see it."""
    import time

    from dulwich.objects import Commit, ObjectID

    from workspaces.changes import Change, TreeEditor
    from workspaces.store import open_store

    with open_store(workspace) as store:
        head = store.branch_head("main")
        assert head is not None
        editor = TreeEditor(store, store.commit(head).tree)
        for path, target in links.items():
            editor.apply(Change("symlink", path, target))
        commit = Commit()
        commit.tree = editor.write()
        commit.parents = [ObjectID(head.encode())]
        commit.author = commit.committer = b"Old Berth <berth@localhost>"
        commit.author_time = commit.commit_time = int(time.time())
        commit.author_timezone = commit.commit_timezone = 0
        commit.message = b"links, some out of the tree\n"
        store.repo.object_store.add_object(commit)
        store.advance("main", head, commit.id.decode())
        return commit.id.decode()
