"""Preview benchmark (issue 6), run by hand: `.venv/bin/python bench/previews.py`.

(a) Time from `POST …/previews` to the first 200 through the proxy for the python-http
    template (dependency cache warm), with phases, against a bare docker-py run of the
    same image, command, hardening and /deps, polled from inside its netns until it
    answers. Interleaved, medians. Berth's client asks once it has its cookie; the proxy
    holds a request to a starting preview until it is ready (PREVIEW_HOLD_S), and the
    client asks again only if that ran out.
(b) Proxy throughput and latency for small GETs, 32 keep-alive connections (wrk from
    Debian), against a minimal Node `http` server in the sandbox: through the preview
    gateway (PREVIEW_PORT, the door preview URLs name) vs wrk run inside the sandbox's
    own network namespace (nsenter), alternating; for scale, daphne serving a trivial
    app (the ceiling of a proxy inside daphne, as there was before the gateway), and
    (when nginx is installed) nginx with one worker
    proxying inside the same namespace: what a C proxy manages on this machine.

Uses its own DATA_DIR (var/bench-previews), Redis db 7, and its own daphne, Celery worker
and runner agent. Goals: (a) <= 1.5 s p50 and <= 1.3x bare; (b) >= 70% of direct
throughput and <= 2 ms added p50.
"""

import argparse
import asyncio
import http.client
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = ROOT / "var" / "bench-previews"
sys.path.insert(0, str(ROOT))
from bench.common import redis_url, worker_queues  # noqa: E402

os.environ.update(
    DJANGO_SETTINGS_MODULE="config.settings",
    DATA_DIR=str(DATA_DIR),
    REDIS_URL=redis_url(7),
    PYTHONUNBUFFERED="1",
)

from bench.common import (  # noqa: E402
    children_cpu_seconds,
    cpu_seconds,
    in_namespace,
    start_daphne,
)
from bench.preview_apps import NGINX_CONF, NGINX_PORT, NODE_SERVER, NODE_TOML  # noqa: E402

BIN = Path(sys.executable).parent
PORT = 18768
GATEWAY = PORT + 2


def setup_instance() -> str:
    shutil.rmtree(DATA_DIR, ignore_errors=True)
    DATA_DIR.mkdir(parents=True)
    import django

    django.setup()
    from bench.common import migrate

    migrate()
    from accounts import actions as accounts
    from accounts.access import Actor
    from workspaces import actions
    from workspaces.changes import Change

    team, _ = accounts.create_team("bench")
    user, _ = accounts.create_user(team, "bench", "admin", None, "bench-password-1")
    _, token = accounts.create_token(
        team, user, "bench", ["workspace:read", "run", "preview"], None
    )
    actions.create_workspace(team, Actor(user), "App", "app", "python-http")
    fast = actions.create_workspace(team, Actor(user), "Fast", "fast")
    actions.commit_changes(
        fast,
        Actor(user),
        [
            Change("write", "server.js", NODE_SERVER.encode()),
            Change("write", "workspace.toml", NODE_TOML.encode()),
        ],
        "a minimal node server",
    )
    return token


def start(cmd: list[str], name: str) -> subprocess.Popen:
    log = open(DATA_DIR / f"{name}.log", "w")  # noqa: SIM115 (lives as long as the process)
    return subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)


def ms(a: str | None, b: str | None) -> float:
    if not a or not b:
        return float("nan")
    return (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds() * 1000


class Client:
    def __init__(self, token: str) -> None:
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self.conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=60)

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        try:
            self.conn.request(method, path, json.dumps(body) if body else None, self.headers)
            return json.loads(self.conn.getresponse().read())
        except (http.client.RemoteDisconnected, ConnectionError):
            # daphne closed the kept-alive connection while wrk ran: once more, anew
            self.conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=60)
            self.conn.request(method, path, json.dumps(body) if body else None, self.headers)
            return json.loads(self.conn.getresponse().read())


def cookie_for(link: str) -> tuple[str, str]:
    """(host, cookie header) after exchanging a ticket link on the preview host."""
    host = link.split("/")[2]
    path = "/" + link.split("/", 3)[3]
    conn = http.client.HTTPConnection("127.0.0.1", GATEWAY, timeout=10)
    conn.request("GET", path, headers={"Host": host})
    response = conn.getresponse()
    response.read()
    assert response.status == 302, response.status
    value = next(
        h.split(";")[0]
        for h in response.headers.get_all("Set-Cookie") or []
        if h.startswith("berth_preview_lax=")
    )
    return host, value


def first_200(host: str, cookie: str) -> None:
    while True:
        conn = http.client.HTTPConnection("127.0.0.1", GATEWAY, timeout=10)
        conn.request(
            "GET", "/", headers={"Host": host, "Cookie": cookie, "Accept": "application/json"}
        )
        response = conn.getresponse()
        response.read()
        conn.close()
        if response.status == 200:
            return
        time.sleep(0.01)


def berth_preview(client: Client, slug: str) -> tuple[float, dict]:
    t = time.perf_counter()
    preview = client.call("POST", f"/api/v1/workspaces/{slug}/previews", {})
    link = client.call("POST", f"/api/v1/previews/{preview['id']}/link")["url"]
    host, cookie = cookie_for(link)
    first_200(host, cookie)
    took = (time.perf_counter() - t) * 1000
    return took, client.call("GET", f"/api/v1/previews/{preview['id']}")


def stop(client: Client, preview: dict) -> None:
    client.call("POST", f"/api/v1/previews/{preview['id']}/stop")
    while client.call("GET", f"/api/v1/runs/{preview['run']}")["state"] in (
        "queued",
        "preparing",
        "running",
    ):
        time.sleep(0.05)


def bare_preview(i: int) -> float:
    """The same with docker-py alone: volume, create (same hardening, the cached /deps
    read-only), put_archive of the same tree, start, probe from inside until 200."""
    from docker.types import Mount

    from previews.probe import probe
    from runs.models import DepCache
    from sandbox.docker import _host_config
    from sandbox.engine import engine
    from sandbox.models import Sandbox
    from sandbox.netns import Namespace, NamespaceGone
    from workspaces.archive import tree_tarball
    from workspaces.models import Workspace
    from workspaces.store import open_store

    workspace = Workspace.objects.get(slug="app")
    cache = DepCache.objects.get(workspace=workspace)
    with open_store(workspace) as store:
        tarball = tree_tarball(store, store.branch_head("main") or "")
    t = time.perf_counter()
    name = Sandbox.engine_name(f"bare{i:08d}")
    template = Sandbox(
        name=name,
        image="berth-sandbox:bookworm",
        limits={"cpus": 1.0, "memory_mb": 512, "disk_mb": 2048, "pids": 256, "nofile": 4096},
        runtime="runc",
    )
    engine().volumes.create(name)
    container = engine().containers.create(
        "berth-sandbox:bookworm",
        ["sh", "-c", "/deps/venv/bin/python app.py"],
        name=name,
        **_host_config(
            template,
            "runc",
            [Mount("/deps", cache.volume, type="volume", read_only=True)],
            None,
            None,
        ),
    )
    container.put_archive("/workspace", tarball)
    container.start()
    container.reload()
    ns = Namespace.of_pid(container.attrs["State"]["Pid"])

    async def until_200() -> None:
        while await probe(ns, 8000, "bare", "/") != 200:
            await asyncio.sleep(0.01)

    try:
        asyncio.run(until_200())
    except NamespaceGone:
        raise SystemExit("the bare container died") from None
    took = (time.perf_counter() - t) * 1000
    container.remove(force=True)
    engine().volumes.get(name).remove(force=True)
    return took


Row = tuple[float, float, float, dict[str, float]]


def wrk(
    args: list[str],
    prefix: list[str] | None = None,
    app: list[int] | None = None,
    proxy: list[int] | None = None,
) -> Row:
    """(requests/s, p50 ms, p99 ms, CPU µs per request) of one wrk run; the CPU used
    by the `app`'s processes, the `proxy`'s and wrk's own, over the requests made."""
    before = cpu_seconds(app or []), cpu_seconds(proxy or []), children_cpu_seconds()
    run = subprocess.run(
        [*(prefix or []), "wrk", "-t1", "-c32", "-d8s", "--latency", *args],
        capture_output=True,
        text=True,
    )
    if run.returncode:
        raise SystemExit(f"wrk {args} failed ({run.returncode}): {run.stdout} {run.stderr}")
    out = run.stdout
    after = cpu_seconds(app or []), cpu_seconds(proxy or []), children_cpu_seconds()
    done = re.search(r"(\d+) requests in", out)
    assert done, out
    cpu = {
        who: (b - a) / int(done.group(1)) * 1e6
        for who, a, b in zip(("app", "proxy", "wrk"), before, after, strict=True)
    }

    def latency(pct: str) -> float:
        m = re.search(rf"^\s+{pct}%\s+([\d.]+)(us|ms|s)$", out, re.M)
        assert m, out
        return float(m.group(1)) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[m.group(2)]

    rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
    assert rate, out
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    assert not errors, out
    return float(rate.group(1)), latency("50"), latency("99"), cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", choices=["a", "b"], help="measure one part")
    args = parser.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("wrk is needed: apt-get install wrk")
    token = setup_instance()
    procs = [
        start_daphne(PORT),
        start(
            [
                sys.executable,
                "manage.py",
                "preview_gateway",
                "--port",
                str(GATEWAY),
                "--app",
                f"127.0.0.1:{PORT}",
            ],
            "gateway",
        ),
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
    client = Client(token)
    try:
        deadline = time.monotonic() + 60
        while "runner agent started" not in (DATA_DIR / "agent.log").read_text():
            assert time.monotonic() < deadline, "agent did not start"
            time.sleep(0.1)
        while "preview gateway serving" not in (DATA_DIR / "gateway.log").read_text():
            assert time.monotonic() < deadline, "the gateway did not start"
            time.sleep(0.1)
        # Warm-up: fills the dependency cache, first connections, first containers.
        _, warm = berth_preview(client, "app")
        stop(client, warm)
        bare_preview(0)
        berth_ms, bare_ms, phases = [], [], []
        # Interleaved: both see the same machine noise.
        for i in range(args.runs if args.only != "b" else 0):
            took, preview = berth_preview(client, "app")
            berth_ms.append(took)
            phases.append(preview["timings"])
            stop(client, preview)
            bare_ms.append(bare_preview(i + 1))

        fast = client.call("POST", "/api/v1/workspaces/fast/previews", {})
        host, cookie = cookie_for(client.call("POST", f"/api/v1/previews/{fast['id']}/link")["url"])
        first_200(host, cookie)
        from previews.models import Preview

        pid = Preview.objects.get(public_id=fast["id"]).sandbox_pid
        assert pid, "the preview has no sandbox process"
        gateway, direct, ceiling, nginx = [], [], [], []
        inside = ["nsenter", f"--net=/proc/{pid}/ns/net"]
        if shutil.which("nginx"):
            (DATA_DIR / "nginx.conf").write_text(NGINX_CONF.format(dir=DATA_DIR, port=NGINX_PORT))
            procs.append(
                start([*inside, "nginx", "-c", str(DATA_DIR / "nginx.conf")], "nginx-stdout")
            )
        trivial = subprocess.Popen(
            [
                str(BIN / "daphne"),
                "-b",
                "127.0.0.1",
                "-p",
                str(PORT + 1),
                "bench.trivial_asgi:application",
            ],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        procs.append(trivial)
        deadline = time.monotonic() + 30
        while True:
            try:
                http.client.HTTPConnection("127.0.0.1", PORT + 1, timeout=1).request("GET", "/")
                break
            except OSError:
                assert time.monotonic() < deadline, "the trivial daphne did not start"
                time.sleep(0.1)
        # The app: every process in the sandbox's namespace but nginx and wrk's own.
        sandbox = in_namespace(pid)
        app = [p for name, pids in sandbox.items() if name not in ("nginx", "wrk") for p in pids]
        for _ in range(args.rounds if args.only != "a" else 0):
            gateway.append(
                wrk(
                    [
                        "-H",
                        f"Host: {host}",
                        "-H",
                        f"Cookie: {cookie}",
                        f"http://127.0.0.1:{GATEWAY}/",
                    ],
                    app=app,
                    proxy=[procs[1].pid],
                )
            )
            direct.append(wrk(["http://127.0.0.1:8000/"], inside, app=app))
            ceiling.append(wrk([f"http://127.0.0.1:{PORT + 1}/"], proxy=[trivial.pid]))
            if shutil.which("nginx"):
                workers = in_namespace(pid).get("nginx", [])
                nginx.append(wrk([f"http://127.0.0.1:{NGINX_PORT}/"], inside, app, workers))
        stop(client, client.call("GET", f"/api/v1/previews/{fast['id']}"))
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(20)

    if berth_ms:
        report_a(args, berth_ms, bare_ms, phases)
    if gateway:
        report_b(args, gateway, direct, ceiling, nginx)
    print("goals: (a) <= 1500 ms p50 and <= 1.3x bare; (b) >= 70% of direct, <= 2 ms added p50")


def report_a(
    args: argparse.Namespace, berth_ms: list[float], bare_ms: list[float], phases: list[dict]
) -> None:
    med = statistics.median
    ratio = med(berth_ms) / med(bare_ms)
    print(f"\n(a) python-http: start -> first 200, {args.runs} each, interleaved\n")
    print(f"{'path':46} {'median ms':>10} {'ratio':>8}")
    print(f"{'Berth: POST, link, ticket, GET until 200':46} {med(berth_ms):10.1f} {ratio:7.2f}x")
    print(f"{'bare docker-py, probed in its netns to 200':46} {med(bare_ms):10.1f}")
    print("\nBerth phases (median ms)")
    steps = [
        ("queued -> hydrated (worker, create, put_archive)", "queued_at", "hydrated_at"),
        ("hydrated -> process started", "hydrated_at", "process_started_at"),
        ("process started -> ready (health check 2xx)", "process_started_at", "ready_at"),
    ]
    for label, a, b in steps:
        print(f"  {label:50} {med(ms(p[a], p[b]) for p in phases):8.1f}")
    print(f"  {'queued -> ready':50} {med(ms(p['queued_at'], p['ready_at']) for p in phases):8.1f}")


def report_b(
    args: argparse.Namespace, gateway: list, direct: list, ceiling: list, nginx: list
) -> None:
    med = statistics.median

    print(
        f"\n(b) small GETs, 32 keep-alive connections, wrk -d8s, {args.rounds} rounds alternating\n"
    )
    print(f"{'':61}{'CPU µs per request':>26}")
    print(
        f"{'path':34} {'req/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'app':>8} {'proxy':>8} {'wrk':>8}"
    )
    for label, rows in (
        ("through the preview gateway", gateway),
        ("direct, inside the sandbox netns", direct),
        ("daphne + a trivial ASGI app", ceiling),
        ("nginx, 1 worker, in the netns", nginx),
    ):
        if not rows:
            continue
        cpu = " ".join(f"{med(r[3][who] for r in rows):8.1f}" for who in ("app", "proxy", "wrk"))
        print(
            f"{label:34} {med(r[0] for r in rows):10.0f} {med(r[1] for r in rows):8.2f} "
            f"{med(r[2] for r in rows):8.2f} {cpu}"
        )
    share = med(r[0] for r in gateway) / med(r[0] for r in direct)
    added = med(r[1] for r in gateway) - med(r[1] for r in direct)
    rounds = " ".join(f"{g[0] / d[0]:.0%}" for g, d in zip(gateway, direct, strict=True))
    print(
        f"\ngateway throughput = {share:.0%} of direct (round by round: {rounds}); added p50 "
        f"latency = {added:.2f} ms; "
        f"{med(r[0] for r in gateway) / med(r[0] for r in ceiling):.1f}x daphne serving a "
        "trivial app"
    )
    if nginx:
        share = med(r[0] for r in nginx) / med(r[0] for r in direct)
        added = med(r[1] for r in nginx) - med(r[1] for r in direct)
        print(f"nginx proxying in the same place: {share:.0%} of direct, {added:.2f} ms added p50")
        print(
            f"gateway throughput = {med(r[0] for r in gateway) / med(r[0] for r in nginx):.0%} "
            "of nginx's in the same place"
        )
    # What the CPU allows: direct, the app alone holds one core (wrk has the other);
    # through a proxy, the app, the proxy and wrk share this machine's cores, so a proxy's
    # share of direct is bounded by what the three use per request together.
    cores = os.cpu_count() or 1
    app = med(r[3]["app"] for r in direct)
    print(
        f"CPU bounds on {cores} cores: direct <= {1e6 / app:.0f}/s (the app's {app:.1f} µs "
        "per request on one core)",
        end="",
    )
    for label, rows in (("gateway", gateway), ("nginx", nginx)):
        if rows:
            used = sum(med(r[3][who] for r in rows) for who in ("app", "proxy", "wrk"))
            print(f"; {label} <= {cores * 1e6 / used:.0f}/s ({used:.1f} µs per request)", end="")
    print()


if __name__ == "__main__":
    main()
