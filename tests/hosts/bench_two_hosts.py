"""The runner-hosts benchmark (issue 35), run by `bench/hosts.py`: not a test of the
suite (its name is no `test_*.py`), but it stands on the two-host fixtures of
test_two_hosts.py (engine B with B's agent, worker and gateway, as a runner host).

Side by side in one run, each case alternating between this host (`local`, engine A)
and host b, the other one drained:
1. a log line from a sandbox to a reader: the command prints its own clock, a reader
   on the run's log WebSocket (the real ASGI app, in this process) takes the
   difference on arrival. On one machine the internal API is loopback: B's agent and
   A's both ship their batches to the same daphne, over the same path.
2. `echo hi` through the API: from the request to the run's end.
3. 100,000 lines from B: every line arrives, once, in order.
"""

import asyncio
import statistics
import time

import pytest
from django.conf import settings

from runs.models import Run
from sandbox.hosts import Host
from tests.hosts.test_two_hosts import b, b_stack, shop  # noqa: F401 (fixtures)
from tests.support import engine_b
from tests.support.logs import connect
from tests.support.runs import Agent as RunAgent

pytestmark = [pytest.mark.docker, pytest.mark.postgres]

ROUNDS = 3  # of each case on each host, alternating
LINES_PER_RUN = 25
ECHOES = 8
FLOOD = 100_000


def place_on(name: str) -> None:
    """New work goes to `name`: the other host drains."""
    for host in Host.objects.all():
        host.undrain() if host.name == name else host.drain()


async def arrivals(run: Run, secret: str) -> list[tuple[float, str]]:
    """(arrival time, text) of each stdout entry of the run's log, until its end."""
    ws = await connect(run, 0, secret)
    out: list[tuple[float, str]] = []
    try:
        while True:
            message = await ws.receive_json_from(timeout=120)
            now = time.time()
            if message["type"] == "entries":
                out += [(now, e["text"]) for e in message["entries"] if e["stream"] == "stdout"]
            elif message["type"] == "end":
                return out
    finally:
        await ws.disconnect()


def line_latencies(agent: RunAgent, secret: str) -> list[float]:
    command = f"for i in $(seq 1 {LINES_PER_RUN}); do date +%s.%N; sleep 0.1; done"
    run = agent.run(command)
    got = asyncio.run(arrivals(Run.objects.get(public_id=run["id"]), secret))
    assert len(got) == LINES_PER_RUN, got
    return [(at - float(text)) * 1000 for at, text in got]


def echo_ms(agent: RunAgent) -> float:
    started = time.perf_counter()
    done = agent.wait(agent.run("echo hi"))
    assert done["state"] == "succeeded", done
    return (time.perf_counter() - started) * 1000


def test_bench_two_hosts(b, shop, client, cast, capsys):  # noqa: F811 (the fixtures)
    _, secret = cast.token(cast.carol, ["workspace:read", "workspace:write", "run"])
    agent = RunAgent(client, secret)
    agent.wait(agent.run("true"))  # warm: the first run's cache and image lookups
    latency: dict[str, list[float]] = {"local": [], engine_b.NAME: []}
    echo: dict[str, list[float]] = {"local": [], engine_b.NAME: []}
    for _ in range(ROUNDS):
        for host in latency:
            place_on(host)
            latency[host] += line_latencies(agent, secret)
    for _ in range(ECHOES):
        for host in echo:
            place_on(host)
            echo[host].append(echo_ms(agent))

    place_on(engine_b.NAME)
    started = time.perf_counter()
    flood = agent.wait(agent.run(f"seq 1 {FLOOD}"), timeout=300)
    took = time.perf_counter() - started
    assert flood["state"] == "succeeded", flood
    row = Run.objects.get(public_id=flood["id"])
    assert row.runner_host == engine_b.NAME
    lines = agent.output(flood)
    assert lines == [str(i) for i in range(1, FLOOD + 1)], "lines lost or repeated"

    a_lat, b_lat = statistics.median(latency["local"]), statistics.median(latency["b"])
    a_echo, b_echo = statistics.median(echo["local"]), statistics.median(echo["b"])
    with capsys.disabled():
        print(f"\n\nrunner hosts, part 2 (instance {settings.BERTH_INSTANCE}; one machine:")
        print("the internal API is loopback)\n")
        print(f"{'case':<44}{'A (local)':>12}{'B':>12}{'B / A':>8}")
        print(
            f"{'log line, sandbox → reader, median ms':<44}{a_lat:>12.1f}{b_lat:>12.1f}"
            f"{b_lat / a_lat:>8.2f}"
        )
        print(
            f"{'  p90 ms':<44}{_p90(latency['local']):>12.1f}{_p90(latency['b']):>12.1f}"
            f"{_p90(latency['b']) / _p90(latency['local']):>8.2f}"
        )
        print(
            f"{'echo hi, request → end, median ms':<44}{a_echo:>12.0f}{b_echo:>12.0f}"
            f"{b_echo / a_echo:>8.2f}"
        )
        print(
            f"\n{FLOOD:,} lines from B: {len(lines):,} arrived in order, none lost or "
            f"repeated; request → end {took:.1f} s ({FLOOD / took:,.0f} lines/s)\n"
        )
        print(
            f"({ROUNDS} runs of {LINES_PER_RUN} lines and {ECHOES} echoes on each host, "
            "alternating)\n"
        )


def _p90(values: list[float]) -> float:
    return sorted(values)[max(0, round(0.9 * len(values)) - 1)]
