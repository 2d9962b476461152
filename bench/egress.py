"""Egress benchmark (issue 7), run by hand: `.venv/bin/python bench/egress.py`.

Downloads 50 MB from a host-local HTTP server (sendfile, so the server is never the
bottleneck) with curl from inside a sandbox through Berth's egress proxy, as
`http://files.test:<port>/` (mapped to 127.0.0.1), and with the same curl on the host
directly; and, for the runtime's own ceiling, from a server inside the same sandbox on
its own loopback (no proxy at all). Rounds alternate (N downloads in the sandbox, then
N on the host, then N inside), so all see the same machine noise; curl's own
`speed_download` is the figure (the run's start-up is not in it). Under runc and gvisor.

Uses its own DATA_DIR (var/bench-egress), Redis db 8, its own Celery worker and runner
agent. Goal: throughput ratio (proxied / direct) >= 0.5.
"""

import argparse
import http.server
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = ROOT / "var" / "bench-egress"
sys.path.insert(0, str(ROOT))
from bench.common import redis_url, start_daphne, worker_queues  # noqa: E402

os.environ.update(
    DJANGO_SETTINGS_MODULE="config.settings",
    DATA_DIR=str(DATA_DIR),
    REDIS_URL=redis_url(8),
    PYTHONUNBUFFERED="1",
    EGRESS_HOSTS="files.test=127.0.0.1",
    EGRESS_ALLOWED_ADDRESSES="127.0.0.1",
    EGRESS_MAX_MB="100000",
)

BIN = Path(sys.executable).parent
SIZE = 50 * 1024 * 1024
WEB_PORT = 18774  # its daphne: the worker fetches runs' files from it
CURL = "curl -sS -o /dev/null -w '%{speed_download}\\n'"


class _Send(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    path_on_disk = DATA_DIR / "50m.bin"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(SIZE))
        self.end_headers()
        with open(self.path_on_disk, "rb") as f:
            self.connection.sendfile(f)

    def log_message(self, *args: object) -> None:
        pass


def setup_instance(port: int) -> tuple[dict[str, Any], Any]:
    shutil.rmtree(DATA_DIR, ignore_errors=True)
    DATA_DIR.mkdir(parents=True)
    (DATA_DIR / "50m.bin").write_bytes(os.urandom(SIZE))
    import django

    django.setup()
    from bench.common import migrate

    migrate()
    from accounts import actions as accounts
    from accounts.access import Actor
    from workspaces import actions
    from workspaces.changes import Change

    team, _ = accounts.create_team("bench")
    team.egress_ceiling = [f"files.test:{port}"]
    team.save()
    user, _ = accounts.create_user(team, "bench", "admin", None, "bench-password-1")
    workspaces = {}
    for runtime in ("runc", "gvisor"):
        ws = actions.create_workspace(team, Actor(user), runtime, runtime)
        actions.commit_changes(
            ws,
            Actor(user),
            [
                Change(
                    "write",
                    "workspace.toml",
                    (
                        f'[sandbox]\nruntime = "{runtime}"\n'
                        f'[network]\negress = ["files.test:{port}"]\n'
                    ).encode(),
                )
            ],
            "egress",
        )
        workspaces[runtime] = ws
    return workspaces, Actor(user)


def start(cmd: list[str], name: str) -> subprocess.Popen:
    log = open(DATA_DIR / f"{name}.log", "w")  # noqa: SIM115 (lives as long as the process)
    return subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)


def sandboxed(
    workspace: object, actor: object, port: int, n: int, command: str = ""
) -> list[float]:
    from logs import logstore
    from runs import actions
    from runs.models import Run

    command = command or "; ".join([f"{CURL} http://files.test:{port}/50m"] * n)
    run = actions.start_run(workspace, actor, command)  # type: ignore[arg-type]
    deadline = time.monotonic() + 300
    while Run.objects.get(pk=run.pk).is_active:
        assert time.monotonic() < deadline, "the run did not end"
        time.sleep(0.05)
    run.refresh_from_db()
    lines = [e["text"] for e in logstore.read(run.public_id, 0, 1000) if e["stream"] != "system"]
    assert run.state == "succeeded", (run.state, run.message, lines)
    return [float(x) for x in lines]


# A server inside the sandbox itself, on its own loopback: what the runtime's network
# stack manages with no proxy at all (under gVisor, that is the ceiling).
LOOPBACK_SERVER = """python3 -c '
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 8001)); s.listen(8)
blob = bytes(1 << 20)
while True:
    c, _ = s.accept(); c.recv(65536)
    c.sendall(b"HTTP/1.1 200 OK\\r\\nContent-Length: 52428800\\r\\nConnection: close\\r\\n\\r\\n")
    for _ in range(50): c.sendall(blob)
    c.close()
' & sleep 1"""


def inside(workspace: object, actor: object, n: int) -> list[float]:
    return sandboxed(
        workspace,
        actor,
        0,
        n,
        LOOPBACK_SERVER + "; " + "; ".join([f"{CURL} http://127.0.0.1:8001/"] * n),
    )


def direct(port: int, n: int) -> list[float]:
    out = []
    for _ in range(n):
        answer = subprocess.run(
            ["sh", "-c", f"{CURL} http://127.0.0.1:{port}/50m"],
            capture_output=True,
            text=True,
            check=True,
        )
        out.append(float(answer.stdout))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--per-round", type=int, default=3)
    args = parser.parse_args()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Send)
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    workspaces, actor = setup_instance(port)
    procs = [
        start_daphne(WEB_PORT),  # the worker fetches runs' files from it
        start(
            [
                str(BIN / "celery"),
                "-A",
                "config",
                "worker",
                "-Q",
                worker_queues(),
                "--pool",
                "threads",
                "--concurrency",
                "4",
                "--without-heartbeat",
                "--without-mingle",
                "--without-gossip",
            ],
            "worker",
        ),
        start([sys.executable, "manage.py", "runner_agent"], "agent"),
    ]
    results: dict[str, tuple[list[float], list[float], list[float]]] = {}
    try:
        deadline = time.monotonic() + 60
        while "runner agent started" not in (DATA_DIR / "agent.log").read_text():
            assert time.monotonic() < deadline, "agent did not start"
            time.sleep(0.1)
        for runtime, workspace in workspaces.items():
            sandboxed(workspace, actor, port, 1)  # warm-up
            proxied, host, loop = [], [], []
            for _ in range(args.rounds):
                proxied += sandboxed(workspace, actor, port, args.per_round)
                host += direct(port, args.per_round)
                loop += inside(workspace, actor, args.per_round)
            results[runtime] = (proxied, host, loop)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(30)
        server.shutdown()

    print(f"\n50 MB downloads, {args.rounds} rounds x {args.per_round}, medians (MB/s)")
    print(
        f"{'runtime':<8} {'proxied':>9} {'host':>9} {'ratio':>6}   {'in-sandbox':>10} "
        f"{'ratio':>6}   goal: proxied/host >= 0.5"
    )
    for runtime, (proxied, host, loop) in results.items():
        p, d, i = (statistics.median(x) / 1e6 for x in (proxied, host, loop))
        print(f"{runtime:<8} {p:>9.0f} {d:>9.0f} {p / d:>6.2f}   {i:>10.0f} {p / i:>6.2f}")
    print(
        "in-sandbox: curl from a server on the sandbox's own loopback, no proxy at all "
        "(the runtime's own ceiling)"
    )


if __name__ == "__main__":
    main()
