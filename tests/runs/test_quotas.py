"""Per-team quotas and fair admission (issue 8), through the API on the real stack: Celery
worker, runner agent, Docker engine, and daphne for previews.

The cast: team A (alice, bob, carol) floods the machine; team B (charlie) asks for one
run. Limits are the operator's per-team overrides on the Team row.
"""

import datetime

import pytest

from accounts.access import Actor
from runs.models import Run
from tests.support.previews import PROBE_APP, Browser, PreviewAgent, probe_toml, write
from tests.support.runs import TERMINAL, Agent
from tests.support.servers import wait_for
from workspaces import actions as workspace_actions

pytestmark = pytest.mark.docker


def limits(team, **fields) -> None:
    for name, value in fields.items():
        setattr(team, name, value)
    team.save()


def cancel_all(agent: Agent, runs: list[dict]) -> None:
    for run in runs:
        agent.client.post(f"/api/v1/runs/{run['id']}/cancel", **agent.headers)
    for run in runs:
        assert agent.wait(run)["state"] in TERMINAL


def row(run: dict) -> Run:
    return Run.objects.get(public_id=run["id"])


def test_a_team_at_its_limit_waits_while_another_teams_run_goes(agents, cast):
    a, b = agents
    limits(cast.team_a, max_concurrent_runs=2)
    floods = [a.run("sleep 5") for _ in range(10)]
    theirs = b.run("echo from team b")
    # The answer to a POST says where the run stands: admitted at once, or queued.
    assert floods[0]["queue"] is None and floods[0]["timings"]["admitted_at"]
    assert floods[-1]["queue"]["waiting_for"] == "team_limit"
    try:
        done = b.wait(theirs)
        assert done["state"] == "succeeded", done
        # The last of A's runs says where it stands and why it waits.
        last = a.get(f"/runs/{floods[-1]['id']}").json()
        assert last["state"] == "queued" and last["timings"]["admitted_at"] is None
        assert last["queue"]["waiting_for"] == "team_limit"
        waiting = Run.objects.filter(
            workspace__team=cast.team_a, admitted_at=None, state="queued"
        ).count()
        assert last["queue"]["position"] == waiting
        assert "its limit of 2" in last["queue"]["message"]
        # B waited for no slot of A's: admitted before any of A's runs ended, and it
        # started before A's third run did.
        b_row = row(theirs)
        ended = [r.finished_at for r in map(row, floods) if r.finished_at]
        assert all(b_row.admitted_at < at for at in ended)
        third = row(floods[2])
        assert (
            third.process_started_at is None or b_row.process_started_at < third.process_started_at
        )
        # Never more than two of A's at once.
        assert (
            Run.objects.filter(
                workspace__team=cast.team_a,
                admitted_at__isnull=False,
                state__in=["preparing", "running"],
            ).count()
            <= 2
        )
        # Under contention the flood's containers weigh less than the single run's: A's
        # third run is prepared once a slot of A's frees, with seven of A's still waiting.
        wait_for(
            lambda: "cpu_shares" in row(floods[2]).isolation,
            60,
            interval=0.1,
            what="A's third run to be prepared",
        )
        assert row(floods[2]).isolation["cpu_shares"] < b_row.isolation["cpu_shares"] == 1024
        # Within a team, first come first served: the admitted ones are the oldest.
        admitted = [r.admitted_at is not None for r in map(row, floods)]
        assert admitted == sorted(admitted, reverse=True)
    finally:
        cancel_all(a, floods)
    assert row(floods[-1]).reason == "cancelled_by_user"


def test_past_the_queue_limit_the_api_answers_429_with_retry_after(agents, cast):
    a, _ = agents
    limits(cast.team_a, max_concurrent_runs=1, max_queued_runs=2)
    runs = [a.run("sleep 30")]
    # The first one takes the team's one slot.
    wait_for(lambda: row(runs[0]).admitted_at is not None, 30, what="the first run's admission")
    runs += [a.run("sleep 30"), a.run("sleep 30")]
    try:
        before = Run.objects.count()
        r = a.client.post(
            "/api/v1/workspaces/shop/runs",
            {"command": "echo one more"},
            content_type="application/json",
            **a.headers,
        )
        assert r.status_code == 429, r.content
        error = r.json()["error"]
        assert error["code"] == "quota_exceeded" and error["details"]["limit"] == "queued_runs"
        assert "2 runs waiting, its limit" in error["message"]
        assert int(r["Retry-After"]) > 0
        assert Run.objects.count() == before  # nothing recorded, nothing half-made
        usage = a.get("/usage").json()
        assert usage["runs"] == {"running": 1, "max_concurrent": 1, "queued": 2, "max_queued": 2}
        assert a.get(f"/runs/{runs[2]['id']}").json()["queue"]["position"] == 2
    finally:
        cancel_all(a, runs)


def test_the_cpu_budget_is_sampled_and_refuses_runs_until_it_resets(agents, cast, signed_in):
    a, b = agents
    limits(cast.team_a, cpu_seconds_per_day=1)
    busy = a.wait(a.run("timeout 4 sh -c 'while :; do :; done'; echo spun"))
    assert busy["state"] == "succeeded", busy
    assert busy["cpu_seconds"] >= 1.0  # sampled from the cgroup while it ran
    r = a.client.post(
        "/api/v1/workspaces/shop/runs",
        {"command": "echo again"},
        content_type="application/json",
        **a.headers,
    )
    assert r.status_code == 429, r.content
    error = r.json()["error"]
    assert error["code"] == "cpu_budget_exhausted"
    resets = datetime.datetime.fromisoformat(error["details"]["resets_at"])
    now = datetime.datetime.now(datetime.UTC)
    assert resets.time() == datetime.time(0, 0) and now < resets <= now + datetime.timedelta(days=1)
    assert 0 < int(r["Retry-After"]) <= 86400
    assert "UTC" in error["message"] and "raise the team's budget" in error["message"]
    usage = a.get("/usage").json()
    assert usage["cpu"]["seconds_today"] >= 1.0 and usage["cpu"]["max_per_day"] == 1
    # Team B's budget is its own.
    assert b.wait(b.run("echo b"))["state"] == "succeeded"
    # The usage page says the same, to every member.
    page = signed_in(cast.carol).get("/t/team-a/usage/").content.decode()
    assert "CPU-seconds today (UTC)" in page and "Runs going at once" in page


# -- previews ------------------------------------------------------------------------


@pytest.fixture
def previews(client, cast, run_stack, berth_server) -> PreviewAgent:
    for slug in ("one", "two"):
        workspace = workspace_actions.create_workspace(cast.team_a, Actor(cast.carol), slug, slug)
        write(workspace, cast.carol, {"probe_app.py": PROBE_APP, "workspace.toml": probe_toml()})
    _, secret = cast.token(cast.carol, ["workspace:read", "preview"])
    return PreviewAgent(client, secret, "one")


def start(agent: PreviewAgent, slug: str):
    return agent.client.post(
        f"/api/v1/workspaces/{slug}/previews", {}, content_type="application/json", **agent.headers
    )


def test_at_the_preview_limit_the_longest_idle_one_makes_room_or_the_start_is_refused(
    previews, cast, berth_server, settings
):
    limits(cast.team_a, max_concurrent_previews=1)
    first = previews.wait(previews.start(), {"ready", "failed"})
    assert first["state"] == "ready", first
    browser = Browser(berth_server)
    browser.open(previews.link(first))
    assert browser.get(first["url"]).status_code == 200  # in use just now

    r = start(previews, "two")
    assert r.status_code == 429, r.content
    error = r.json()["error"]
    assert error["code"] == "quota_exceeded" and error["details"]["limit"] == "concurrent_previews"
    assert error["details"]["live"] == [first["id"]]
    assert "each served a request in the last" in error["message"]
    assert previews.get(first)["state"] == "ready"  # refused, nothing stopped

    settings.QUOTA_PREVIEW_BUSY_S = 0  # every request is now "a while ago"
    r = start(previews, "two")
    assert r.status_code == 202, r.content
    second = r.json()
    stopped = previews.get(first)
    assert (stopped["state"], stopped["reason"]) == ("stopped", "stopped_for_quota")
    assert f"when preview {second['id']} started" in stopped["message"]
    assert previews.wait(second, {"ready", "failed"})["state"] == "ready"
    usage = previews.client.get("/api/v1/usage", **previews.headers).json()
    assert usage["previews"] == {"live": 1, "max_concurrent": 1}
    previews.post(second, "stop")
