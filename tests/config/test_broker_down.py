"""Redis down when work is asked for: the request is accepted (the row is committed and
says `queued`), never a 500, and the work runs once the broker is back; the runner agent
sends the tasks the broker never received."""

import asyncio
from collections.abc import Iterator

import pytest

from tests.support.mcp import session as mcp_session
from tests.support.servers import wait_for
from tests.support.stacks import Stack, stack_with_shop

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with stack_with_shop("broker-down") as s:
        yield s


def test_a_run_asked_for_while_redis_is_down_is_accepted_and_runs_once_it_is_back(stack):
    stack.redis.stop()
    try:
        r = stack.api("POST", "/workspaces/shop/runs", {"command": "echo after the outage"})
        assert r.status_code == 202, r.text
        run = r.json()
        assert run["state"] == "queued"
        # Still queued while the broker is away: nothing could have carried it further.
        assert stack.get_run(run)["state"] == "queued"
        rerun = stack.api("POST", f"/runs/{run['id']}/rerun", {})
        assert rerun.status_code == 202, rerun.text
    finally:
        stack.redis.start()  # empty, as a broker that lost its data
    done = stack.wait_run(run, timeout=120)
    assert done["state"] == "succeeded", done
    assert stack.output(done) == ["after the outage"]
    again = stack.wait_run(rerun.json(), timeout=120)
    assert again["state"] == "succeeded" and stack.output(again) == ["after the outage"]


def test_a_preview_started_while_redis_is_down_becomes_ready_once_it_is_back(stack):
    stack.redis.stop()
    try:
        r = stack.api("POST", "/workspaces/shop/previews", {})
        assert r.status_code == 202, r.text
        preview = r.json()
        assert preview["state"] == "starting", preview
    finally:
        stack.redis.start()

    def ready():
        current = stack.api("GET", f"/previews/{preview['id']}").json()
        assert current["state"] in ("starting", "ready"), current
        return current["state"] == "ready"

    wait_for(ready, timeout=120, interval=0.5, what="the preview to be ready")


def test_an_mcp_run_command_while_redis_is_down_answers_queued_and_runs_later(stack):
    async def ask() -> dict:
        async with mcp_session(stack, stack.token) as agent:
            return await agent(
                "run_command", workspace="shop", command="echo via mcp", wait_seconds=0
            )

    stack.redis.stop()
    try:
        run = asyncio.run(ask())
        assert run["state"] == "queued", run
    finally:
        stack.redis.start()
    done = stack.wait_run(run, timeout=120)
    assert done["state"] == "succeeded" and stack.output(done) == ["via mcp"]
