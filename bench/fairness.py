"""Fairness benchmark (issue 8), run by hand: `.venv/bin/python bench/fairness.py`.

Three scenarios, each on a fresh instance with its own Celery worker and runner agent
(the engine, Redis db 6 and DATA_DIR var/bench-fairness are this script's):
1. B alone: team B's 5 runs on an idle machine;
2. quotas: team A's 50 runs, then B's 5, submitted together, with the default quotas;
3. no quotas: the same 55 runs with every limit out of the way (RUNNER_SLOTS and the
   team limits at 1000).
Each run is a short CPU-bound command. Figures: B's completion time (B's first request
→ its last run ended) in 2 against 1, and the time for all 55 in 3 against 2 (throughput ratio).
Goals: B's ratio <= 1.5; throughput >= 0.9 of no-quota.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = ROOT / "var" / "bench-fairness"
sys.path.insert(0, str(ROOT))
from bench.common import redis_url, worker_queues  # noqa: E402

os.environ.update(
    DJANGO_SETTINGS_MODULE="config.settings",
    DATA_DIR=str(DATA_DIR),
    REDIS_URL=redis_url(6),
    PYTHONUNBUFFERED="1",
)

BIN = Path(sys.executable).parent
WORK = "python3 -c 'sum(i * i for i in range(1_500_000))'"  # ~0.1-0.2 s of CPU
UNLIMITED = {
    "RUNNER_SLOTS": "1000",
    "QUOTA_MAX_CONCURRENT_RUNS": "1000",
    "QUOTA_MAX_QUEUED_RUNS": "1000",
}
DEFAULTS: dict[str, int] = {}  # the settings' own values, read at start


def fresh_instance(limits: dict[str, str]) -> tuple[Any, Any]:
    """A new database with teams A and B, each with one workspace; `limits` go to this
    process's settings and, through the environment, to the worker and agent."""
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    for name in UNLIMITED:
        # The same value here, in the worker and in the agent: the scenario's, else what
        # the settings said when this script started (environment overrides included).
        value = str(limits.get(name, DEFAULTS[name]))
        setattr(settings, name, int(value))
        os.environ[name] = value
    connection.close()
    shutil.rmtree(DATA_DIR, ignore_errors=True)
    DATA_DIR.mkdir(parents=True)
    call_command("migrate", verbosity=0)
    from accounts import actions as accounts
    from accounts.access import Actor
    from workspaces import actions

    out = []
    for slug in ("a", "b"):
        team, _ = accounts.create_team(f"team-{slug}")
        user, _ = accounts.create_user(team, f"user-{slug}", "admin", None, "bench-password-1")
        out.append((actions.create_workspace(team, Actor(user), slug, slug), Actor(user)))
    return out[0], out[1]


def start(cmd: list[str], name: str) -> subprocess.Popen:
    log = open(DATA_DIR / f"{name}.log", "w")  # noqa: SIM115 (lives as long as the process)
    return subprocess.Popen(
        cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=os.environ.copy()
    )


def scenario(limits: dict[str, str], a_runs: int, b_runs: int) -> dict[str, float]:
    from runs import actions
    from runs.models import Run

    (a_ws, a_actor), (b_ws, b_actor) = fresh_instance(limits)
    procs = [
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
                "8",
                "--without-heartbeat",
                "--without-mingle",
                "--without-gossip",
            ],
            "worker",
        ),
        start([sys.executable, "manage.py", "runner_agent"], "agent"),
    ]
    try:
        deadline = time.monotonic() + 60
        while "runner agent started" not in (DATA_DIR / "agent.log").read_text():
            assert time.monotonic() < deadline, "agent did not start"
            time.sleep(0.1)
        time.sleep(1)  # let the worker connect: its start-up is not what is measured
        t0 = time.monotonic()
        a = [actions.start_run(a_ws, a_actor, WORK).pk for _ in range(a_runs)]
        tb = time.monotonic()  # B's time counts from its own first request
        b = [actions.start_run(b_ws, b_actor, WORK).pk for _ in range(b_runs)]
        b_done = all_done = None
        deadline = time.monotonic() + 900
        while all_done is None:
            assert time.monotonic() < deadline, "the runs did not end"
            active = set(
                Run.objects.filter(state__in=("queued", "preparing", "running")).values_list(
                    "pk", flat=True
                )
            )
            if b_done is None and not active & set(b):
                b_done = time.monotonic() - tb
            if not active & set(a + b):
                all_done = time.monotonic() - t0
            time.sleep(0.05)
        failed = Run.objects.exclude(state="succeeded").count()
        assert failed == 0, f"{failed} runs did not succeed"
        return {"b": b_done or 0.0, "all": all_done}
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import django

    django.setup()
    from django.conf import settings

    DEFAULTS.update({name: getattr(settings, name) for name in UNLIMITED})
    alone, quota, free = [], [], []
    for _ in range(args.rounds):  # interleaved, so each sees the same machine noise
        alone.append(scenario({}, 0, 5)["b"])
        quota.append(scenario({}, 50, 5))
        free.append(scenario(UNLIMITED, 50, 5))
    b_alone = statistics.median(alone)
    b_mixed = statistics.median(q["b"] for q in quota)
    all_quota = statistics.median(q["all"] for q in quota)
    all_free = statistics.median(f["all"] for f in free)
    print(f"\n{args.rounds} rounds, medians; each run: {WORK}")
    print(f"{'figure':<44} {'seconds':>8}")
    print(f"{'B 5 runs alone':<44} {b_alone:>8.2f}")
    print(f"{'B 5 runs among A 50, quotas':<44} {b_mixed:>8.2f}")
    print(f"{'all 55 runs, quotas':<44} {all_quota:>8.2f}")
    print(f"{'all 55 runs, no quotas':<44} {all_free:>8.2f}")
    print(f"\nB's ratio (among A / alone): {b_mixed / b_alone:.2f}   goal <= 1.5")
    print(f"throughput (quotas / none):   {all_free / all_quota:.2f}   goal >= 0.9")
    print(f"B with no quotas, for scale:  {statistics.median(f['b'] for f in free):.2f} s")


if __name__ == "__main__":
    main()
