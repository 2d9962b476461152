"""One process dying never stops Berth: under `make run` (scripts/supervise, supervisord)
each of daphne, the preview gateway, the Celery worker, beat and the runner agent is
SIGKILLed in turn; it alone is started again, the others go on, Berth answers again
within RECOVERY_S, and a run in flight when the agent died ends as it should."""

import os
import signal
import time
from collections.abc import Iterator

import pytest
import requests
from django.conf import settings

from tests.support.browser import chromium_page
from tests.support.servers import wait_for
from tests.support.stacks import PROGRAMS, Stack, stack_with_shop

pytestmark = pytest.mark.docker

# The stated bound: from a process's death to Berth answering through it again. A
# restart is immediate (the process ran past startsecs); the rest is Python starting
# Django: 4-8 s here, but this 2-core machine is shared with other test runs, and once
# in a combined run the new agent took past 30 s.
RECOVERY_S = 60


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with stack_with_shop("supervision") as s:
        yield s


@pytest.fixture(scope="module")
def preview(stack) -> dict:
    """A public preview of the starter app, reached through the gateway."""
    r = stack.api("POST", "/workspaces/shop/previews", {})
    assert r.status_code == 202, r.text
    preview = r.json()
    r = stack.api("POST", f"/previews/{preview['id']}/public", {"public": True})
    assert r.status_code == 200, r.text
    wait_for(
        lambda: stack.api("GET", f"/previews/{preview['id']}").json()["state"] == "ready",
        timeout=120,
        interval=0.5,
        what="the preview to be ready",
    )
    return preview


def preview_answers(stack: Stack, preview: dict) -> bool:
    host = f"{preview['id']}.{settings.PREVIEW_DOMAIN}:{stack.preview_port}"
    try:
        r = requests.get(
            f"http://127.0.0.1:{stack.preview_port}/", timeout=3, headers={"Host": host}
        )
    except requests.RequestException:
        return False
    return r.status_code == 200 and "Hello, world!" in r.text


def kill(stack: Stack, program: str) -> tuple[int, dict[str, int]]:
    """SIGKILL `program`; returns its new pid once supervisord spawned it, and the pids
    of the others as they were."""
    others = {p: stack.pid(p) for p in PROGRAMS if p != program}
    old = stack.pid(program)
    os.kill(old, signal.SIGKILL)
    new = wait_for(
        lambda: stack.pid(program) != old and stack.pid(program),
        timeout=RECOVERY_S,
        interval=0.1,
        what=f"{program} to be started again",
    )
    assert not stack.alive(old)
    return new, others


def untouched(stack: Stack, others: dict[str, int]) -> None:
    """The defect this replaces: one death stopped every other process."""
    for program, pid in others.items():
        assert stack.pid(program) == pid and stack.alive(pid), f"{program} was restarted"


@pytest.mark.parametrize("program", ["web", "gateway"])
def test_a_killed_server_is_back_within_the_bound_and_alone(stack, preview, program):
    assert preview_answers(stack, preview)
    started = time.monotonic()
    new, others = kill(stack, program)
    stack.wait_serving(timeout=RECOVERY_S)
    wait_for(
        lambda: preview_answers(stack, preview),
        timeout=RECOVERY_S,
        interval=0.2,
        what="the preview through the gateway",
    )
    assert time.monotonic() - started < RECOVERY_S
    assert stack.alive(new)
    untouched(stack, others)


def test_a_killed_worker_is_back_and_takes_new_runs(stack):
    started = time.monotonic()
    ready_before = stack.log().count("ready.")
    _, others = kill(stack, "worker")
    # Berth itself never stopped answering.
    assert stack.serving()
    wait_for(
        lambda: stack.log().count("ready.") > ready_before,
        timeout=RECOVERY_S,
        what="the new worker to be ready",
    )
    assert time.monotonic() - started < RECOVERY_S
    done = stack.wait_run(stack.run("shop", "echo after the worker"), timeout=120)
    assert done["state"] == "succeeded" and stack.output(done) == ["after the worker"]
    untouched(stack, others)


def test_a_worker_killed_while_it_prepares_a_run_never_leaves_it_stuck(stack):
    run = stack.run("shop", "echo prepared twice")
    # Killed while it makes the sandbox: the run says `preparing` then, for about a
    # second (the container may be made and not started yet).
    wait_for(
        lambda: stack.state_now(run) == "preparing",
        timeout=60,
        interval=0.005,
        what="the worker to take the run",
    )
    kill(stack, "worker")
    # Sent again by the agent once stale (RUN_STALE_QUEUED_S): a made but unstarted
    # container is replaced, a started one is left to the agent.
    done = stack.wait_run(run, timeout=120)
    assert done["state"] == "succeeded" and stack.output(done) == ["prepared twice"]


def test_a_killed_beat_is_started_again_alone(stack):
    starts = stack.log().count("beat: Starting...")
    new, others = kill(stack, "beat")
    wait_for(
        lambda: stack.log().count("beat: Starting...") > starts,
        timeout=RECOVERY_S,
        what="beat to start again",
    )
    assert stack.serving() and stack.alive(new)
    untouched(stack, others)


def test_a_run_in_flight_when_the_agent_is_killed_ends_well(stack):
    run = stack.run("shop", "for i in $(seq 1 40); do echo line $i; sleep 0.1; done")
    wait_for(
        lambda: "line 3" in stack.output_so_far(run),
        timeout=90,
        interval=0.1,
        what="the run's first lines",
    )
    starts = stack.log().count("runner agent started")
    started = time.monotonic()
    new, others = kill(stack, "agent")
    assert stack.serving()  # daphne never depended on it
    wait_for(
        lambda: stack.log().count("runner agent started") > starts,
        timeout=RECOVERY_S,
        what="the new agent",
    )
    assert time.monotonic() - started < RECOVERY_S
    done = stack.wait_run(run, timeout=120)
    assert done["state"] == "succeeded", done
    assert stack.output(done) == [f"line {i}" for i in range(1, 41)]
    assert stack.alive(new)
    untouched(stack, others)


@pytest.mark.browser
def test_a_browser_following_a_log_while_daphne_is_killed_resumes_from_its_cursor(stack):
    lines = [f"line {i}" for i in range(1, 61)]
    run = stack.run("shop", "for i in $(seq 1 60); do echo line $i; sleep 0.15; done")
    with chromium_page() as page:
        page.goto(f"{stack.url}/signin/?next=/t/team-a/w/shop/runs/{run['id']}/")
        page.fill("input[name=username]", "alice")
        page.fill("input[name=password]", "alice-password-1")
        page.click("button[type=submit]")
        page.wait_for_selector(".log-lines .line:text-is('line 5')", timeout=90_000)
        page.evaluate("window.notReloaded = true")
        kill(stack, "web")
        # The page says it lost the socket, then reconnects after its last entry.
        page.wait_for_selector(".log-status[data-kind=error]", timeout=RECOVERY_S * 1000)
        page.wait_for_selector(".log-status[data-kind=succeeded]", timeout=120_000)
        assert page.evaluate("window.notReloaded") is True
        shown = page.locator(".log-lines .line.stdout").all_inner_texts()
    # Every line once, in order: nothing lost while daphne was down, nothing repeated.
    assert shown == lines
    assert stack.wait_run(run)["state"] == "succeeded"


def test_ctrl_c_stops_every_process(stack):
    pids = [stack.pid(p) for p in PROGRAMS]
    assert all(stack.alive(pid) for pid in pids)
    assert stack.interrupt(timeout=90) == 0
    assert not [pid for pid in pids if stack.alive(pid)]
