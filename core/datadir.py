"""DATA_DIR is Berth's alone: 0700, and what is in it 0600 files and 0700 folders.

It holds the SQLite database (browser sessions: one read signs in as whoever they
belong to), the secret keys, transcripts, logs and repositories. Berth's processes
create it all with umask 077 (manage.py, scripts/supervise, the systemd units' UMask);
`secure` fixes an install made before that (`manage.py prepare`, at every `make run`).
"""

import os
import stat
from pathlib import Path

PRIVATE = 0o077  # the bits no one but the owner may have


def secure(data_dir: Path) -> int:
    """Make `data_dir` 0700 and take group and other bits off everything in it (links
    are left alone: their own modes mean nothing and their targets may be anywhere);
    returns how many modes changed."""
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    changed = 0
    # The folder first: from then on nothing below is reachable by another user, even
    # while the walk below is still going.
    changed += _tighten(data_dir)
    for folder, dirs, files in os.walk(data_dir):
        for name in [*dirs, *files]:
            changed += _tighten(Path(folder) / name)
    return changed


def _tighten(path: Path) -> int:
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:  # gone meanwhile (a process is running beside us)
        return 0
    if stat.S_ISLNK(mode) or not stat.S_IMODE(mode) & PRIVATE:
        return 0
    path.chmod(stat.S_IMODE(mode) & ~PRIVATE)
    return 1
