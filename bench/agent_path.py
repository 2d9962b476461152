"""An agent's whole task path through MCP (issue 10), run by hand:
`.venv/bin/python bench/agent_path.py [--rounds N]`.

The official SDK client does what an agent does with a fresh workspace: create it from
`python-http`, add a failing test, run the tests (they fail), read the code, fix it in
one commit, run them again (they pass), start a preview, fetch its page, ask for a
deploy. Printed: the number of tool calls and the platform time of each step (request
to response, as the client sees it on loopback) and in total — the human approval is
not part of it. Goals: <= 15 calls, <= 10 s in total.

Uses its own DATA_DIR (var/bench-agent), Redis db 4, its own daphne, Celery worker and
runner agent.
"""

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = ROOT / "var" / "bench-agent"
sys.path.insert(0, str(ROOT))
from bench.common import redis_url, worker_queues  # noqa: E402

os.environ.update(
    DJANGO_SETTINGS_MODULE="config.settings",
    DATA_DIR=str(DATA_DIR),
    REDIS_URL=redis_url(4),
    PYTHONUNBUFFERED="1",
)

from bench.common import start_daphne  # noqa: E402

BIN = Path(sys.executable).parent
PORT = 18770
FAILING_TEST = """import unittest

from app import greeting


class T(unittest.TestCase):
    def test_it_greets_berth(self):
        self.assertEqual(greeting("Berth"), "Ahoy, Berth!")
"""


def setup_instance() -> str:
    shutil.rmtree(DATA_DIR, ignore_errors=True)
    DATA_DIR.mkdir(parents=True)
    import django

    django.setup()
    from bench.common import migrate

    migrate()
    from accounts import actions as accounts

    team, _ = accounts.create_team("bench")
    user, _ = accounts.create_user(team, "bench", "admin", None, "bench-password-1")
    _, secret = accounts.create_token(
        team,
        user,
        "agent",
        ["workspace:read", "workspace:write", "run", "preview", "deploy:request"],
        None,
    )
    return secret


def start(cmd: list[str], name: str) -> subprocess.Popen:
    log = open(DATA_DIR / f"{name}.log", "w")  # noqa: SIM115 (lives as long as the process)
    return subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)


async def scenario(secret: str, slug: str) -> list[tuple[str, float]]:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    steps: list[tuple[str, float]] = []
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {secret}"}, timeout=180) as http,
        Client(streamable_http_client(f"http://127.0.0.1:{PORT}/mcp", http_client=http)) as client,
    ):

        async def call(label: str, tool: str, **args: Any) -> dict[str, Any]:
            t = time.perf_counter()
            result = await client.call_tool(tool, args)
            steps.append((label, (time.perf_counter() - t) * 1000))
            assert not result.is_error, (tool, result.structured_content or result.content)
            return result.structured_content or {}

        made = await call("create_workspace", "create_workspace", name=slug, template="python-http")
        await call(
            "write_files (failing test)",
            "write_files",
            workspace=slug,
            message="a failing test",
            base_commit=made["head"],
            changes=[{"op": "write", "path": "test_ahoy.py", "content": FAILING_TEST}],
        )
        failed = await call(
            "run_command (fails)",
            "run_command",
            workspace=slug,
            command="python3 -m unittest",
            wait_seconds=60,
        )
        assert failed["state"] == "failed", failed
        app = await call("read_file app.py", "read_file", workspace=slug, path="app.py")
        tests = await call("read_file test_app.py", "read_file", workspace=slug, path="test_app.py")
        await call(
            "write_files (fix)",
            "write_files",
            workspace=slug,
            message="ahoy",
            base_commit=app["commit"],
            changes=[
                {
                    "op": "write",
                    "path": "app.py",
                    "content": app["content"].replace('f"Hello, {', 'f"Ahoy, {'),
                },
                {
                    "op": "write",
                    "path": "test_app.py",
                    "content": tests["content"].replace('"Hello, ', '"Ahoy, '),
                },
            ],
        )
        passed = await call(
            "run_command (passes)",
            "run_command",
            workspace=slug,
            command="python3 -m unittest",
            wait_seconds=60,
        )
        assert passed["state"] == "succeeded", passed
        preview = await call("start_preview", "start_preview", workspace=slug)
        assert preview["state"] == "ready", preview
        page = await call("fetch_preview", "fetch_preview", preview_id=preview["id"])
        assert page["status"] == 200 and "Ahoy" in page["body"], page
        asked = await call("request_deploy", "request_deploy", workspace=slug, note="ahoy")
        assert asked["state"] == "requested"
        await client.call_tool("stop_preview", {"preview_id": preview["id"]})
    return steps


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import logging

    logging.getLogger("httpx2").setLevel(logging.WARNING)  # a line per request otherwise
    logging.getLogger("mcp").setLevel(logging.WARNING)
    secret = setup_instance()
    procs = [
        start_daphne(PORT),
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
    rounds = []
    try:
        deadline = time.monotonic() + 60
        while "runner agent started" not in (DATA_DIR / "agent.log").read_text():
            assert time.monotonic() < deadline, "agent did not start"
            time.sleep(0.1)
        for i in range(args.rounds):  # each round a new workspace: cold dependency cache
            rounds.append(asyncio.run(scenario(secret, f"shop{i}")))
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(20)

    print(f"\nAn agent's task path through MCP, {args.rounds} rounds (median ms per step)")
    for i, (label, _) in enumerate(rounds[0]):
        print(f"  {label:32} {statistics.median(r[i][1] for r in rounds):8.0f}")
    totals = [sum(ms for _, ms in r) for r in rounds]
    print(f"  {'total':32} {statistics.median(totals):8.0f}   (goal <= 10000)")
    print(f"tool calls: {len(rounds[0])} (goal <= 15); the human approval is not counted")


if __name__ == "__main__":
    main()
