"""Runner-hosts benchmark (issue 35): a log line from a sandbox on host B to a reader
against the same on host A, `echo hi` placed on B against A, and 100,000 lines from B.

Run by hand (not a test): `.venv/bin/python bench/hosts.py`. Host B is a second Docker
engine on this machine with its own runner agent, worker and gateway, as the suite's
two-host tests run it: this starts a throwaway PostgreSQL (hosts share it) and runs
tests/hosts/bench_two_hosts.py under pytest, which prints the table. Goal: B ≤ 1.5×
A for the log line; none of the 100,000 lines lost.
"""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    folder = tempfile.mkdtemp(prefix="berth-test-postgres-")
    setup = ROOT / "scripts" / "host-setup"
    subprocess.run([str(setup), "postgres-start", folder], check=True)
    try:
        url = "postgres://postgres@" + folder.replace("/", "%2F") + "/berth"
        shutil.rmtree(ROOT / "var" / "test", ignore_errors=True)
        return subprocess.call(
            [
                sys.executable,
                "-m",
                "pytest",
                "tests/hosts/bench_two_hosts.py",
                "-q",
                "-p",
                "no:randomly",
                "--no-header",
                "-p",
                "no:cacheprovider",
            ],
            cwd=ROOT,
            env={**os.environ, "DATABASE_URL": url},
        )
    finally:
        subprocess.run([str(setup), "postgres-stop", folder], check=False)
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
