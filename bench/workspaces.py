"""Workspace benchmark: one-file commits, file reads and clones on a 1,000-file repo.

Run by hand (not a test): `.venv/bin/python bench/workspaces.py [--runs N]`.
It uses its own DATA_DIR (var/bench), starts its own daphne, and prints one table.
Goals (issue 3): commit p50 ≤ 25 ms; clone over Berth's smart HTTP ≤ 2× `git clone
file://` of the same bare repository (a plain local-path clone hard-links objects and
would not be a fair baseline).
"""

import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = ROOT / "var" / "bench"
sys.path.insert(0, str(ROOT))
os.environ.update(DJANGO_SETTINGS_MODULE="config.settings", DATA_DIR=str(DATA_DIR))

from bench.common import p95, start_daphne, timed  # noqa: E402


def setup_instance() -> tuple[str, str]:
    """A fresh instance with a 1,000-file workspace; returns (token, repo path)."""
    shutil.rmtree(DATA_DIR, ignore_errors=True)
    DATA_DIR.mkdir(parents=True)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from accounts import actions as accounts
    from accounts.access import Actor
    from workspaces import actions
    from workspaces.changes import Change

    team, _ = accounts.create_team("bench")
    user, _ = accounts.create_user(team, "bench", "admin", None, "bench-password-1")
    _, token = accounts.create_token(
        team, user, "bench", ["workspace:read", "workspace:write"], None
    )
    ws = actions.create_workspace(team, Actor(user), "Big", "big")
    files = [
        Change(
            "write",
            f"pkg{i // 100}/mod{i % 100}.py",
            (f"# module {i}\n" + "def f(x):\n    return x * 2\n" * 20).encode(),
        )
        for i in range(1000)
    ]
    actions.commit_changes(ws, Actor(user), files, "1,000 files")
    return token, str(ws.repo_path)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--clones", type=int, default=10)
    args = parser.parse_args()
    token, repo = setup_instance()
    port = 18765
    server = start_daphne(port)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    counter = iter(range(10**6))

    def request(method: str, path: str, body: dict | None = None) -> dict:
        conn.request(method, path, json.dumps(body) if body else None, headers)
        response = conn.getresponse()
        data = json.loads(response.read())
        assert response.status < 300, data
        return data

    def commit() -> None:
        n = next(counter)
        request(
            "PUT",
            "/api/v1/workspaces/big/files/pkg3/mod42.py",
            {"content": f"VALUE = {n}\n", "message": f"edit {n}"},
        )

    def read() -> None:
        request("GET", "/api/v1/workspaces/big/files/pkg7/mod13.py")

    work = Path(tempfile.mkdtemp(prefix="berth-bench-"))
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "HOME": str(work)}

    def clone(url: str) -> None:
        target = work / f"c{next(counter)}"
        subprocess.run(["git", "clone", "-q", url, str(target)], check=True, env=env)
        shutil.rmtree(target)

    try:
        commit_ms = timed(commit, args.runs)
        read_ms = timed(read, args.runs)
        http_url = f"http://x:{token}@127.0.0.1:{port}/git/bench/big.git"
        # Interleaved, so both see the same machine noise.
        http_ms, local_ms = [], []
        for _ in range(args.clones):
            http_ms += timed(lambda: clone(http_url), 1)
            local_ms += timed(lambda: clone(f"file://{repo}"), 1)
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(work, ignore_errors=True)

    rows = [
        ("one-file commit via API", commit_ms, None),
        ("read a file via API", read_ms, None),
        ("git clone over Berth HTTP", http_ms, local_ms),
        ("git clone file:// (baseline)", local_ms, None),
    ]
    print(f"\n1,000-file repository; {args.runs} API runs, {args.clones} clones each\n")
    print(f"{'operation':32} {'median ms':>10} {'p95 ms':>10} {'ratio':>8}")
    for name, values, base in rows:
        ratio = f"{statistics.median(values) / statistics.median(base):.2f}x" if base else ""
        print(f"{name:32} {statistics.median(values):10.1f} {p95(values):10.1f} {ratio:>8}")
    print("\ngoals: commit p50 ≤ 25 ms; HTTP clone ≤ 2x file:// clone")


if __name__ == "__main__":
    main()
