"""`scripts/host-setup redis` (what `make run` and `make test` call) gives the local Redis
a password (docs/security.md 28): generated once into REDIS_PASSWORD_FILE, handed over in
a 0600 config file and never on a command line; a passwordless Redis an older host-setup
started (its pidfile) is started again with it, and one it did not start is refused.
Each test runs its own redis-server on a free port, never the shared one."""

import contextlib
import os
import signal
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.support.servers import ROOT, free_port, wait_for

# redis-servers of their own, started by scripts/host-setup.
pytestmark = pytest.mark.servers


class Host:
    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        self.data = tmp / "data"
        self.password_file = tmp / "etc" / "redis.password"
        self.pidfile = self.data / "redis" / "redis.pid"
        self.others: list[Path] = []

    def setup(self) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(ROOT / "scripts/host-setup"), "redis"],
            env={
                **os.environ,
                "DATA_DIR": str(self.data),
                "REDIS_URL": f"redis://127.0.0.1:{self.port}/0",
                "REDIS_PASSWORD_FILE": str(self.password_file),
            },
            capture_output=True,
            text=True,
            timeout=60,
        )

    def bare_redis(self, pidfile: Path) -> int:
        """A passwordless redis-server, started as an older host-setup started it."""
        pidfile.parent.mkdir(parents=True, exist_ok=True)
        self.others.append(pidfile)
        subprocess.run(
            [
                *("redis-server", "--bind", "127.0.0.1", "--port", str(self.port)),
                *("--daemonize", "yes", "--dir", str(pidfile.parent), "--pidfile", str(pidfile)),
                *("--save", "", "--appendonly", "no"),
            ],
            check=True,
        )
        wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), 10, what="redis")
        assert redis.Redis(port=self.port).ping()
        return int(pidfile.read_text())

    def stop_all(self) -> None:
        for pidfile in [self.pidfile, *self.others]:
            with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
                os.kill(int(pidfile.read_text()), signal.SIGTERM)


@pytest.fixture
def host(tmp_path) -> Iterator[Host]:
    h = Host(tmp_path)
    try:
        yield h
    finally:
        h.stop_all()


def refuses_without_password(port: int) -> bool:
    try:
        redis.Redis(port=port, socket_connect_timeout=2).ping()
    except redis.RedisError as e:
        return "uthenticat" in str(e)
    return False


def test_it_starts_redis_with_a_password_of_its_own_never_on_a_command_line(host):
    done = host.setup()
    assert done.returncode == 0, done.stderr
    password = host.password_file.read_text().strip()
    assert len(password) >= 40
    assert stat.S_IMODE(host.password_file.stat().st_mode) == 0o600
    conf = host.data / "redis" / "redis.conf"
    assert stat.S_IMODE(conf.stat().st_mode) == 0o600
    assert refuses_without_password(host.port)
    assert redis.Redis(port=host.port, password=password).ping()
    pid = int(host.pidfile.read_text())
    assert password.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()

    # Again: nothing to do, the same password.
    again = host.setup()
    assert again.returncode == 0 and again.stdout == "", again
    assert host.password_file.read_text().strip() == password
    assert int(host.pidfile.read_text()) == pid


def test_a_passwordless_redis_an_older_host_setup_started_is_started_again_with_one(host):
    old = host.bare_redis(host.pidfile)
    done = host.setup()
    assert done.returncode == 0, done.stderr
    assert "restarting redis-server" in done.stdout
    assert not Path(f"/proc/{old}").exists() or "zombie" in Path(f"/proc/{old}/status").read_text()
    assert refuses_without_password(host.port)
    password = host.password_file.read_text().strip()
    assert redis.Redis(port=host.port, password=password).ping()


def test_a_passwordless_redis_it_did_not_start_is_refused_with_what_to_do(host, tmp_path):
    other = host.bare_redis(tmp_path / "elsewhere" / "redis.pid")
    done = host.setup()
    assert done.returncode != 0
    assert "requirepass" in done.stderr and str(host.password_file) in done.stderr
    assert Path(f"/proc/{other}").exists(), "not the script's to stop"
    assert redis.Redis(port=host.port).ping()


def test_a_password_in_redis_url_is_checked(host):
    assert host.setup().returncode == 0
    password = host.password_file.read_text().strip()
    env = {**os.environ, "DATA_DIR": str(host.data)}
    for given, ok in ((password, True), ("wrong", False)):
        url = f"redis://:{given}@127.0.0.1:{host.port}/0"
        done = subprocess.run(
            [str(ROOT / "scripts/host-setup"), "redis"],
            env={**env, "REDIS_URL": url},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (done.returncode == 0) is ok, done.stderr
        if not ok:
            assert "refuses the password in REDIS_URL" in done.stderr
