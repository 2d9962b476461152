"""An agent's day in one session, through MCP (the official SDK client against daphne
and the real stack): installs stay between turns, a frozen session resumes on the next
exec, and every answer says what survives and what to call next."""

import pytest

from accounts.access import Actor
from tests.support.mcp import Agent, connect
from tests.support.servers import wait_for_async
from tests.support.sessions import tiny_wheel
from workspaces import actions as workspace_actions
from workspaces.changes import Change
from workspaces.store import open_store

pytestmark = pytest.mark.docker

TEST = b"""import unittest

import tinyhello


class Hello(unittest.TestCase):
    def test_hello(self):
        self.assertEqual(tinyhello.hello(), "hello from a wheel")
"""


def stdout(row: dict) -> list[str]:
    return [e["text"] for e in row["output"] if e["stream"] == "stdout"]


def everything(row: dict) -> str:
    return "\n".join(e["text"] for e in row["output"])


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
def test_an_agent_installs_once_tests_twice_and_resumes_a_frozen_session(
    berth_server, run_stack, cast, shop, runtime
):
    name, wheel = tiny_wheel()
    workspace_actions.commit_changes(
        shop,
        Actor(cast.carol),
        [Change("write", name, wheel), Change("write", "test_hello.py", TEST)],
        "a wheel and its test",
    )
    _, secret = cast.token(cast.carol, ["workspace:read", "workspace:write", "run"])

    async def body(agent: Agent) -> None:
        session = await agent("open_session", workspace="shop", runtime=runtime, idle_freeze_s=3)
        assert session["state"] == "ready" and "exec" in session["next"]
        assert session["persistence"]["home_and_tmp"]["kept_now"] is True
        sid = session["id"]

        install = await agent(
            "exec",
            session=sid,
            command=f"python3 -m pip install --user --no-index --break-system-packages {name}",
        )
        assert install["reason"] == "exit_zero", everything(install)
        for _ in range(2):  # the second time without reinstalling: $HOME kept it
            tested = await agent("exec", session=sid, command="python3 -m unittest -q test_hello")
            assert tested["reason"] == "exit_zero", everything(tested)
            assert "OK" in everything(tested)

        async def frozen() -> bool:
            return (await agent("session_status", session=sid))["state"] == "frozen"

        await wait_for_async(frozen, 30, what="the session to freeze")
        resumed = await agent("exec", session=sid, command="python3 -c 'import tinyhello'")
        assert resumed["reason"] == "exit_zero", everything(resumed)
        assert (await agent("session_status", session=sid))["state"] == "ready"

        # A write through write_files is there for the very next exec.
        wrote = await agent(
            "write_files",
            workspace="shop",
            changes=[{"op": "write", "path": "NOTES.md", "content": "from the agent\n"}],
            message="notes",
        )
        assert [(f["id"], f["state"]) for f in wrote["followers"]] == [(sid, "applied")]
        seen = await agent("exec", session=sid, command="cat NOTES.md")
        assert stdout(seen) == ["from the agent"]

        # A file the session generated, committed on its branch.
        made = await agent("exec", session=sid, command="echo report > report.txt")
        assert made["reason"] == "exit_zero" and "next" in made, everything(made)
        committed = await agent(
            "commit_session_changes", session=sid, message="the report", paths=["report.txt"]
        )
        assert committed["files"] == ["report.txt"] and committed["branch"] == "main"
        with open_store(shop) as store:
            head = store.branch_head("main")
            assert head is not None and committed["commit"] == head
            _, blob = store.lookup(head, "report.txt")
            assert store.blob(blob) == b"report\n"
        closed = await agent("close_session", session=sid)
        assert closed["state"] in ("stopping", "stopped")

        missing = await agent.error("exec", session="nosuchsession", command="true")
        assert missing["code"] == "not_found"

    connect(berth_server, secret, body)
