"""Runs through the API, carried by a real Celery worker and runner agent on the real
Docker engine."""

import subprocess
import time

import pytest
from channels.layers import channel_layers

from accounts.access import Actor
from runs.models import Run
from sandbox.engine import engine
from tests.support.runs import (
    TERMINAL,
    Agent,
    engine_output,
    no_container_left,
    set_toml,
    wait_for_output,
)
from tests.support.servers import wait_for
from workspaces import actions as workspace_actions
from workspaces.changes import Change

pytestmark = pytest.mark.docker


@pytest.fixture
def shop(cast):
    return workspace_actions.create_workspace(
        cast.team_a, Actor(cast.carol), "Shop", "shop", "python-http"
    )


@pytest.fixture
def agent(client, cast, shop, run_stack):
    _, secret = cast.token(cast.carol, ["workspace:read", "workspace:write", "run"])
    return Agent(client, secret)


def test_echo_hi_succeeds_with_its_log_and_a_pinned_commit(agent, shop, cast):
    head = agent.get("/workspaces/shop").json()["head"]
    run = agent.run("echo hi; cat README.md | head -1")
    # The branch moves while the run is queued: the run keeps the commit it asked for.
    workspace_actions.commit_changes(
        shop, Actor(cast.carol), [Change("write", "README.md", b"# moved\n")], "move"
    )
    done = agent.wait(run)
    assert done["state"] == "succeeded" and done["exit_code"] == 0
    assert done["reason"] == "exit_zero" and done["commit"] == head
    assert agent.output(done) == ["hi", "# Python HTTP starter"]
    assert done["isolation"]["network"] == "none"
    assert done["isolation"]["cap_drop"] == ["ALL"] and done["isolation"]["user"] == "1000:1000"
    assert done["isolation"]["read_only_root"] is True
    timings = done["timings"]
    assert all(
        timings[k]
        for k in ("queued_at", "started_at", "hydrated_at", "process_started_at", "finished_at")
    )
    assert no_container_left(done)


def test_a_nonzero_exit_fails_with_its_code(agent):
    done = agent.wait(agent.run("echo oops >&2; exit 3"))
    assert (done["state"], done["reason"], done["exit_code"]) == ("failed", "exit_nonzero", 3)
    # After the template's "[setup] …" system lines, the command's own stderr.
    log = agent.log(done)
    assert [e["seq"] for e in log] == list(range(1, len(log) + 1))
    assert [e for e in log if e["stream"] != "system"] == [
        {"seq": len(log), "stream": "stderr", "text": "oops"}
    ]


def test_a_command_not_found_says_so(agent):
    done = agent.wait(agent.run("no-such-tool --version"))
    assert (done["state"], done["exit_code"], done["reason"]) == (
        "failed",
        127,
        "command_not_found",
    )
    assert "not found" in done["message"]


def test_a_missing_image_is_an_error_that_says_what_to_do(agent, shop, cast):
    set_toml(shop, cast, '[sandbox]\nimage = "berth-test-missing:none"\n')
    done = agent.wait(agent.run("true"))
    assert (done["state"], done["reason"]) == ("error", "image_missing")
    assert "berth-test-missing:none" in done["message"]


def test_an_image_off_the_allowlist_is_refused(agent, shop, cast):
    set_toml(shop, cast, '[sandbox]\nimage = "debian:bookworm"\n')
    done = agent.wait(agent.run("true"))
    assert (done["state"], done["reason"]) == ("error", "image_not_allowed")


@pytest.mark.parametrize(
    "field",
    [
        {"privileged": True},
        {"binds": ["/:/host"]},
        {"network_mode": "host"},
        {"cap_add": ["SYS_ADMIN"]},
        {"user": "root"},
    ],
)
def test_engine_options_in_a_request_are_refused(agent, field):
    r = agent.client.post(
        "/api/v1/workspaces/shop/runs",
        {"command": "true", **field},
        content_type="application/json",
        **agent.headers,
    )
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid"
    assert not Run.objects.exists()


def test_a_timeout_past_the_maximum_is_refused(agent):
    r = agent.client.post(
        "/api/v1/workspaces/shop/runs",
        {"command": "true", "timeout_s": 10**6},
        content_type="application/json",
        **agent.headers,
    )
    assert r.status_code == 422 and r.json()["error"]["details"]["maximum"] == 3600


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
def test_the_sandbox_is_isolated(agent, runtime):
    script = (
        "python3 -c \"import os; print(sorted(os.listdir('/sys/class/net')))\"; id -u; "
        "grep CapEff /proc/self/status; "
        "python3 -c \"print([l.split()[3].split(',')[0] for l in open('/proc/mounts') "
        "if l.split()[1] == '/'][0])\"; "
        "head -1 /workspace/app.py"
    )
    done = agent.wait(agent.run(script, runtime=runtime))
    assert done["state"] == "succeeded", agent.output(done)
    out = agent.output(done)
    assert out[0] == "['lo']" and out[1] == "1000"
    assert out[2].split() == ["CapEff:", "0000000000000000"]
    assert out[3] == "ro"
    assert out[4] == '"""A tiny web app using only the standard library."""'
    expected = "runsc" if runtime == "gvisor" else "runc"
    assert done["isolation"]["runtime"] == expected


def test_cancel_stops_a_running_run(agent):
    run = agent.run("echo started; sleep 300")
    assert wait_for_output(agent, run, "started")
    r = agent.client.post(f"/api/v1/runs/{run['id']}/cancel", **agent.headers)
    assert r.status_code == 202
    done = agent.wait(run, timeout=30)
    assert (done["state"], done["reason"]) == ("cancelled", "cancelled_by_user")
    assert "carol" in done["message"]
    assert no_container_left(done)


def test_a_client_can_wait_for_the_end_instead_of_polling(agent):
    run = agent.run("echo started; sleep 2; echo done")
    assert agent.get(f"/runs/{run['id']}").json()["state"] not in TERMINAL  # no wait
    # One request that returns when the run has ended (woken by the end's signal).
    done = agent.get(f"/runs/{run['id']}?wait=60").json()
    assert (done["state"], done["exit_code"]) == ("succeeded", 0)
    assert agent.output(done) == ["started", "done"]
    # A wait shorter than the run returns the run as it is then. The test client runs
    # each async request on an event loop of its own (daphne has one for its life): the
    # layer the first wait used may hold a lock bound to its ended loop (CI run 5).
    channel_layers.backends.clear()
    long = agent.run("sleep 300")
    still = agent.get(f"/runs/{long['id']}?wait=1").json()
    assert still["state"] in ("queued", "preparing", "running")
    agent.client.post(f"/api/v1/runs/{long['id']}/cancel", **agent.headers)
    # Past the maximum, or negative: the one error shape, saying what is allowed.
    for bad in ("121", "-1", "soon"):
        r = agent.get(f"/runs/{run['id']}?wait={bad}")
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid", r.content
    assert agent.get("/runs/nope?wait=5").status_code == 404


def test_a_fork_bomb_stops_at_the_pids_limit_and_the_neighbour_still_runs(agent, shop, cast):
    set_toml(shop, cast, "[sandbox]\ntimeout_s = 8\n")
    # The bomb in a subshell, then `exec` (no fork): the shell that must outlive it
    # until the timeout never needs a free pid itself (dash exits when a fork fails).
    bomb = agent.run("(bomb() { bomb | bomb & }; bomb); exec sleep 600")
    started = time.monotonic()
    neighbour = agent.wait(agent.run("echo ok"), timeout=60)
    assert neighbour["state"] == "succeeded" and agent.output(neighbour) == ["ok"]
    assert time.monotonic() - started < 30
    done = agent.wait(bomb, timeout=90)
    assert (done["state"], done["reason"]) == ("timed_out", "timeout")
    assert "8 s" in done["message"]
    assert no_container_left(done)


def test_memory_past_the_limit_ends_oom_killed(agent, shop, cast):
    set_toml(shop, cast, "[sandbox]\nmemory_mb = 64\n")
    done = agent.wait(agent.run('python3 -c "b = bytearray(512 * 1024 * 1024)"'))
    assert (done["state"], done["reason"]) == ("oom_killed", "oom")
    assert "64 MB" in done["message"]


def test_a_flood_hits_the_log_cap_and_says_so(agent):
    line = "x" * 199
    done = agent.wait(agent.run(f"yes {line} | head -c 30000000; echo done"), timeout=180)
    assert done["state"] == "succeeded"
    log = agent.log(done)
    markers = [e for e in log if e["stream"] == "system" and "truncated" in e["text"]]
    assert len(markers) == 1
    assert sum(len(e["text"]) for e in log if e["stream"] == "stdout") <= 10 * 1024 * 1024


def test_a_command_that_ignores_sigterm_is_killed_at_the_timeout(agent, shop, cast):
    set_toml(shop, cast, "[sandbox]\ntimeout_s = 3\n")
    started = time.monotonic()
    done = agent.wait(agent.run("trap '' TERM; echo trapped; sleep 600"), timeout=60)
    assert (done["state"], done["reason"]) == ("timed_out", "timeout")
    assert time.monotonic() - started < 45
    assert agent.output(done) == ["trapped"]


def test_a_background_process_does_not_outlive_the_run(agent):
    done = agent.wait(agent.run("setsid sleep 4242 > /dev/null 2>&1 & echo left"))
    assert done["state"] == "succeeded"
    assert no_container_left(done)
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert "sleep 4242" not in ps


def test_writing_past_disk_mb_ends_disk_quota_exceeded(agent, shop, cast):
    set_toml(shop, cast, "[sandbox]\ndisk_mb = 20\n")
    done = agent.wait(
        agent.run("for i in $(seq 1 40); do head -c 1048576 /dev/zero > f$i; done; sleep 60")
    )
    assert (done["state"], done["reason"]) == ("failed", "disk_quota_exceeded")
    assert "20 MB" in done["message"]


def test_100k_lines_arrive_complete_and_in_order(agent):
    done = agent.wait(agent.run("seq 1 100000"), timeout=180)
    assert done["state"] == "succeeded"
    lines = agent.output(done)
    assert lines == [str(i) for i in range(1, 100001)]


def test_invalid_utf8_and_ansi_are_kept_safe(agent):
    done = agent.wait(agent.run(r"printf 'ok \377\376 bytes\n\033[31mred\033[0m\n'"))
    assert done["state"] == "succeeded"
    assert agent.output(done) == ["ok \ufffd\ufffd bytes", "\x1b[31mred\x1b[0m"]


def test_killing_the_worker_right_after_submit_loses_nothing(agent, run_stack):
    run = agent.run("echo survived")
    run_stack.worker.kill()
    run_stack.worker.start()
    done = agent.wait(run, timeout=240)
    assert done["state"] == "succeeded" and agent.output(done) == ["survived"]
    assert no_container_left(done)


def test_killing_the_agent_mid_run_loses_nothing(agent, run_stack):
    run = agent.run("for i in $(seq 1 30); do echo line $i; sleep 0.1; done")
    assert wait_for_output(agent, run, "line 3")
    run_stack.agent.kill()
    # The run goes on writing while no agent listens: wait until the engine has more.
    container = engine().containers.get(Run.objects.get(public_id=run["id"]).container_name)
    kept = lambda: b"line 12\n" in engine_output(container)  # noqa: E731
    wait_for(kept, 30, what="line 12 in the engine's log")
    run_stack.agent.start()
    done = agent.wait(run, timeout=120)
    assert done["state"] == "succeeded"
    assert agent.output(done) == [f"line {i}" for i in range(1, 31)]
    assert no_container_left(done)
