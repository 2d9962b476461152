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
