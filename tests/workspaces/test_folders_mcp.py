"""An agent on MCP renames and deletes a folder with write_files, one commit each, under
the same path rules and merge guard as a file."""

from typing import Any

from tests.support.mcp import Agent, connect


def test_an_agent_renames_and_deletes_a_folder_through_write_files(berth_server, cast):
    _, secret = cast.token(cast.carol, ["workspace:read", "workspace:write"])

    async def body(agent: Agent) -> dict[str, Any]:
        made = await agent("create_workspace", name="Shop", template="python-http")
        docs = await agent(
            "write_files",
            workspace="shop",
            message="docs",
            changes=[
                {"op": "write", "path": "docs/a.md", "content": "A\n"},
                {"op": "write", "path": "docs/deep/b.md", "content": "B\n"},
            ],
            base_commit=made["head"],
        )
        moved = await agent(
            "write_files",
            workspace="shop",
            message="guides",
            changes=[{"op": "rename", "path": "docs", "to": "guides"}],
            base_commit=docs["commit"],
        )
        assert moved["parent"] == docs["commit"]
        b = await agent("read_file", workspace="shop", path="guides/deep/b.md")
        assert b["content"] == "B\n"
        refused = await agent.error(
            "write_files",
            workspace="shop",
            message="bad",
            changes=[{"op": "rename", "path": "guides", "to": "x/.git"}],
        )
        assert refused["code"] == "invalid_path"
        # From the older base, a folder the branch changed since is never deleted unseen.
        stale = await agent.error(
            "write_files",
            workspace="shop",
            message="gone",
            changes=[{"op": "delete", "path": "guides"}],
            base_commit=docs["commit"],
        )
        assert stale["code"] == "conflict"
        gone = await agent(
            "write_files",
            workspace="shop",
            message="gone",
            changes=[{"op": "delete", "path": "guides"}],
            base_commit=moved["commit"],
        )
        return await agent("list_files", workspace="shop", ref=gone["commit"])

    root = connect(berth_server, secret, body)
    names = {e["name"] for e in root["entries"]}
    assert "guides" not in names and "docs" not in names and "app.py" in names
