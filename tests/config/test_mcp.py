"""Agents through MCP (issue 10): the official SDK client against daphne serving the real
stack (Celery worker, runner agent, Docker), in both protocol eras."""

import asyncio
import base64
from collections.abc import Awaitable, Callable
from typing import Any

import httpx2
import pytest
from django.conf import settings

from accounts.access import Actor
from accounts.models import Activity
from deploys.models import DeployRequest
from runs.models import Run
from tests.support.mcp import Agent, connect, session
from tests.support.servers import wait_for_async
from workspaces import actions as workspace_actions
from workspaces import history
from workspaces.store import open_store

pytestmark = pytest.mark.docker

MODES = ["legacy", "2026-07-28"]


@pytest.mark.parametrize("mode", MODES)
def test_both_protocol_eras_list_the_tools_and_say_who_is_calling(berth_server, cast, mode):
    _, secret = cast.token(cast.carol, ["workspace:read", "run"])

    async def body(agent: Agent) -> None:
        assert agent.client.protocol_version == ("2025-11-25" if mode == "legacy" else mode)
        tools = {t.name: t for t in (await agent.client.list_tools()).tools}
        assert {
            "whoami",
            "list_workspaces",
            "create_workspace",
            "list_files",
            "read_file",
            "write_files",
            "history",
            "diff",
            "run_command",
            "get_run",
            "read_run_log",
            "cancel_run",
            "start_preview",
            "get_preview",
            "stop_preview",
            "fetch_preview",
            "request_deploy",
            "get_deploy",
        } <= set(tools)
        assert not [n for n in tools if "approve" in n or "rollback" in n]
        assert (
            tools["run_command"].output_schema
            and "wait_seconds" in tools["run_command"].input_schema["properties"]
        )
        me = await agent("whoami")
        assert me["user"] == "carol" and me["team"]["slug"] == "team-a"
        assert sorted(me["scopes"]) == ["run", "workspace:read"]

    connect(berth_server, secret, body, mode)


def test_the_door_refuses_bad_credentials_and_foreign_hosts(berth_server, cast):
    token, secret = cast.token(cast.carol, ["workspace:read"])
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        },
    }
    base = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    url = f"http://127.0.0.1:{berth_server.port}/mcp"
    with httpx2.Client(timeout=30) as http:
        r = http.post(url, json=init, headers=base)
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
        assert r.json()["error"]["code"] == "unauthenticated"
        auth = {**base, "Authorization": f"Bearer {secret}"}
        r = http.post(url, json=init, headers={**auth, "Origin": "http://evil.example"})
        assert r.status_code == 403
        r = http.post(url, json=init, headers={**auth, "Host": "evil.example"})
        assert r.status_code == 421
        assert http.post(url + "/", json=init, headers=auth).status_code == 200  # no 307
        r = http.post(url, content=b"x" * (17 * 1024 * 1024), headers=auth)
        assert r.status_code == 413 and r.json()["error"]["code"] == "too_large"
        token.expires_at = token.created_at
        token.save()
        r = http.post(url, json=init, headers=auth)
        assert r.status_code == 401 and r.json()["error"]["code"] == "token_expired"


FAILING_TEST = """import unittest

from app import greeting


class T(unittest.TestCase):
    def test_it_greets_berth(self):
        self.assertEqual(greeting("Berth"), "Ahoy, Berth!")
"""


def test_an_agent_fixes_a_failing_test_previews_it_and_asks_for_a_deploy(
    berth_server, run_stack, cast, signed_in
):
    _, secret = cast.token(
        cast.alice, ["workspace:read", "workspace:write", "run", "preview", "deploy:request"]
    )

    async def body(agent: Agent) -> dict[str, Any]:
        made = await agent("create_workspace", name="Shop", template="python-http")
        assert made["slug"] == "shop" and made["head"]
        wrote = await agent(
            "write_files",
            workspace="shop",
            message="a test that fails",
            changes=[{"op": "write", "path": "test_ahoy.py", "content": FAILING_TEST}],
            base_commit=made["head"],
        )
        failed = await agent(
            "run_command", workspace="shop", command="python3 -m unittest -v", wait_seconds=60
        )
        assert (failed["state"], failed["exit_code"]) == ("failed", 1), failed
        log = "\n".join(e["text"] for e in failed["log_tail"])
        assert "AssertionError: 'Hello, Berth!' != 'Ahoy, Berth!'" in log
        assert failed["commit"] == wrote["commit"]
        app = await agent("read_file", workspace="shop", path="app.py")
        tests = await agent("read_file", workspace="shop", path="test_app.py")
        fixed = await agent(
            "write_files",
            workspace="shop",
            message="greet with ahoy",
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
        passed = await agent(
            "run_command", workspace="shop", command="python3 -m unittest -v", wait_seconds=60
        )
        assert passed["state"] == "succeeded" and passed["commit"] == fixed["commit"], passed
        preview = await agent("start_preview", workspace="shop", wait_seconds=60)
        assert preview["state"] == "ready", preview
        assert preview["link"] and "/__berth/ticket?t=" in preview["link"]
        page = await agent("fetch_preview", preview_id=preview["id"], path="/")
        assert page["status"] == 200 and "Ahoy, world!" in page["body"]
        asked = await agent("request_deploy", workspace="shop", note="greets with ahoy")
        assert asked["state"] == "requested" and asked["commit"] == fixed["commit"]
        # A full URL, under APP_URL (docs/security.md 38): MCP's answers name no origin.
        assert asked["review_url"] == f"{settings.APP_URL}/t/team-a/w/shop/deploys/{asked['id']}/"
        return asked

    asked = connect(berth_server, secret, body)
    signed_in(cast.bob).post(f"{asked['review_url']}approve/")

    async def follow(agent: Agent) -> dict[str, Any]:
        return await wait_for_async(
            lambda: agent("get_deploy", deploy_id=asked["id"]),
            180,
            interval=0.2,
            what="the deploy to end",
            until=lambda deploy: deploy["state"] in ("live", "failed"),
        )

    live = connect(berth_server, secret, follow, "2026-07-28")
    assert live["state"] == "live" and live["approvals"] == ["bob"], live
    # The team sees what the agent did, under its token's name.
    verbs = set(Activity.objects.filter(token__name="alice agent").values_list("verb", flat=True))
    assert {"workspace.created", "run.started", "preview.started", "deploy.requested"} <= verbs


def test_bad_input_and_abuse_get_clear_errors_and_change_nothing(berth_server, cast):
    shop = workspace_actions.create_workspace(
        cast.team_a, Actor(cast.alice), "Shop", "shop", "python-http"
    )
    with open_store(shop) as store:
        head = store.branch_head("main")
    _, theirs = cast.token(cast.charlie, ["workspace:read", "workspace:write", "run"])
    _, reader = cast.token(cast.carol, ["workspace:read"])
    _, writer = cast.token(cast.carol, ["workspace:read", "workspace:write"])

    async def other_team(agent: Agent) -> None:
        error = await agent.error("read_file", workspace="shop", path="app.py")
        assert error["code"] == "not_found"
        error = await agent.error("get_run", run_id="nonexistent1")
        assert error["code"] == "not_found"

    async def read_only(agent: Agent) -> None:
        error = await agent.error(
            "write_files",
            workspace="shop",
            message="x",
            changes=[{"op": "write", "path": "a.txt", "content": "a"}],
        )
        assert error["code"] == "missing_scope" and "workspace:write" in error["message"]
        error = await agent.error("request_deploy", workspace="shop")
        assert error["code"] == "missing_scope"

    async def bad_writes(agent: Agent) -> None:
        error = await agent.error(
            "write_files",
            workspace="shop",
            message="x",
            changes=[{"op": "write", "path": "../etc/passwd", "content": "a"}],
        )
        assert error["code"] == "invalid_path", error
        error = await agent.error(
            "write_files",
            workspace="shop",
            message="x",
            changes=[{"op": "write", "path": "invoice\u202etxt.exe", "content": "a"}],
        )
        assert error["code"] == "invalid_path" and "U+202E" in error["message"], error
        ok = await agent(
            "write_files",
            workspace="shop",
            message="moves on",
            changes=[{"op": "write", "path": "a.txt", "content": "a"}],
            base_commit=head,
        )
        # From the same stale base: another file is carried onto the new head (a.txt
        # stays), the same file with other content is a conflict showing theirs.
        merged = await agent(
            "write_files",
            workspace="shop",
            message="stale, elsewhere",
            changes=[{"op": "write", "path": "b.txt", "content": "b"}],
            base_commit=head,
        )
        assert merged["parent"] == ok["commit"] and merged["merged"] == []
        error = await agent.error(
            "write_files",
            workspace="shop",
            message="stale",
            changes=[{"op": "write", "path": "a.txt", "content": "not a"}],
            base_commit=head,
        )
        assert error["code"] == "conflict" and error["details"]["head"] == merged["commit"]
        assert error["details"]["files"][0]["why"] == "added"
        assert "-a" in error["details"]["files"][0]["diff"]
        big = base64.b64encode(b"x" * (11 * 1024 * 1024)).decode()
        error = await agent.error(
            "write_files",
            workspace="shop",
            message="big",
            changes=[{"op": "write", "path": "big.bin", "content": big, "encoding": "base64"}],
        )
        assert error["code"] == "file_too_large" and "at most 10 MB" in error["message"]
        error = await agent.error("run_command", workspace="shop", command=["not", "a str"])
        assert "validation error" in error["message"]
        error = await agent.error("list_files", workspace="nope")
        assert error["code"] == "not_found" and "nope" in error["message"]

    connect(berth_server, theirs, other_team)
    connect(berth_server, reader, read_only, "2026-07-28")
    connect(berth_server, writer, bad_writes)
    with open_store(shop) as store:
        files = {e["path"] for e in store.list_dir(store.branch_head("main"), "")}
    assert "b.txt" in files and "big.bin" not in files and "a.txt" in files
    with open_store(shop) as store:
        assert history.read_file(store, store.branch_head("main"), "a.txt")["content"] == "a"
    assert not DeployRequest.objects.exists()


def test_one_agents_long_wait_holds_up_no_other_call(berth_server, run_stack, cast):
    workspace_actions.create_workspace(
        cast.team_a, Actor(cast.alice), "Shop", "shop", "python-http"
    )
    _, secret = cast.token(cast.carol, ["workspace:read", "run"])

    async def waits(agent: Agent) -> dict[str, Any]:
        return await agent(
            "run_command", workspace="shop", command="sleep 8; echo slept", wait_seconds=60
        )

    def sleeping() -> bool:
        return Run.objects.filter(command__startswith="sleep 8", state="running").exists()

    async def meanwhile(agent: Agent) -> list[str]:
        # Once it runs, the other call is waiting.
        await wait_for_async(
            lambda: asyncio.to_thread(sleeping), 120, what="the other call's run to be running"
        )
        states = []
        for _ in range(5):
            await agent("whoami")
            listed = await agent("list_workspaces")
            assert [w["slug"] for w in listed["workspaces"]] == ["shop"]
            states += await asyncio.to_thread(
                lambda: list(
                    Run.objects.filter(command__startswith="sleep 8").values_list(
                        "state", flat=True
                    )
                )
            )
        return states

    async def both() -> tuple[dict[str, Any], list[str]]:
        async def one(body: Callable[[Agent], Awaitable[Any]]) -> Any:
            async with session(berth_server, secret) as agent:
                return await body(agent)

        return await asyncio.gather(one(waits), one(meanwhile))

    done, states = asyncio.run(both())
    assert done["state"] == "succeeded" and done["log_tail"][-1]["text"] == "slept"
    # Every other call was answered while the first one was still waiting on its run.
    assert states and set(states) == {"running"}, states
