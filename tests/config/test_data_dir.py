"""An install from before umask 077 (a 0755 DATA_DIR, a 0644 database, open transcripts
and repositories) is made private by `manage.py prepare`, the step `make run` takes
before serving: the issue's attacker read all of these as `nobody`."""

import shutil
import sqlite3
import stat
import subprocess
import uuid
from pathlib import Path

import pytest
from django.conf import settings

from tests.support.servers import BIN, ROOT

pytestmark = pytest.mark.docker  # prepare checks the sandbox image on the engine


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_prepare_makes_an_existing_open_data_dir_private():
    # Under /tmp, reachable by anyone: what refuses `nobody` is DATA_DIR's own mode.
    root = Path("/tmp") / f"berth-datadir-{uuid.uuid4().hex[:8]}"
    data = root / "data"
    try:
        # As an older Berth left it, under umask 022.
        (data / "terminals" / "s1").mkdir(parents=True, mode=0o755)
        (data / "repos" / "team" / "ws.git" / "objects").mkdir(parents=True, mode=0o755)
        for d in [root, data, *data.rglob("*")]:
            d.chmod(0o755)
        sqlite3.connect(data / "berth.sqlite3").close()
        files = {
            data / "berth.sqlite3": None,
            data / "secret_key": "old-key",
            data / "terminals" / "s1" / "t1.log": "echo token\n",
            data / "repos" / "team" / "ws.git" / "HEAD": "ref: refs/heads/main\n",
            data / "repos" / "team" / "ws.git" / "objects" / "pack": "x",
        }
        for path, text in files.items():
            if text is not None:
                path.write_text(text)
            path.chmod(0o644)
        (data / "link").symlink_to("/etc/hostname")
        assert (
            subprocess.run(
                ["runuser", "-u", "nobody", "--", "cat", str(data / "secret_key")],
                capture_output=True,
            ).returncode
            == 0
        )  # open, as reported

        out = subprocess.run(
            [str(BIN / "python"), "manage.py", "prepare"],
            cwd=ROOT,
            env={
                "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
                "DJANGO_SETTINGS_MODULE": "config.settings",
                "DATA_DIR": str(data),
                "SANDBOX_IMAGE": settings.SANDBOX_IMAGE,
                "REDIS_URL": settings.REDIS_URL,
            },
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        assert "private" in out.stdout

        assert mode(data) == 0o700
        for path in [*files, *(p for p in data.rglob("*") if not p.is_symlink())]:
            assert mode(path) & 0o077 == 0, f"{path} is {mode(path):o}"
        assert mode(data / "berth.sqlite3") == 0o600
        assert mode(data / "repos" / "team" / "ws.git") == 0o700
        assert mode(Path("/etc/hostname")) & 0o004, "a link's target is left alone"
        assert (data / "secret_key").read_text() == "old-key", "kept, only made private"
        for path in (data / "berth.sqlite3", data / "terminals" / "s1" / "t1.log"):
            refused = subprocess.run(
                ["runuser", "-u", "nobody", "--", "cat", str(path)], capture_output=True, text=True
            )
            assert refused.returncode != 0 and "Permission denied" in refused.stderr
    finally:
        shutil.rmtree(root, ignore_errors=True)
