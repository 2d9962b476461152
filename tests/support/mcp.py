"""An agent through MCP: the official SDK client against daphne."""

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import TextContent


class Agent:
    """Tool calls through one MCP client connection; results as (is_error, structured)."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.calls = 0

    async def __call__(self, tool_name: str, /, **args: Any) -> dict[str, Any]:
        self.calls += 1
        result = await self.client.call_tool(tool_name, args)
        assert not result.is_error, (tool_name, args, result.structured_content or result.content)
        return result.structured_content or {}

    async def error(self, tool_name: str, /, **args: Any) -> dict[str, Any]:
        """A call that must fail: the API's error object (or the SDK's text, for input it
        refused before any Berth code ran)."""
        result = await self.client.call_tool(tool_name, args)
        assert result.is_error, (tool_name, args, result.structured_content)
        if result.structured_content:
            return result.structured_content["error"]
        first = result.content[0]
        assert isinstance(first, TextContent)
        return {"code": "invalid_arguments", "message": first.text}


@contextlib.asynccontextmanager
async def session(server, secret: str, mode: str = "legacy") -> AsyncIterator[Agent]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {secret}"}, timeout=180) as http,
        Client(streamable_http_client(f"{server.url}/mcp", http_client=http), mode=mode) as client,
    ):
        yield Agent(client)


def connect(
    server, secret: str, body: Callable[[Agent], Awaitable[Any]], mode: str = "legacy"
) -> Any:
    async def main() -> Any:
        async with session(server, secret, mode) as agent:
            return await body(agent)

    return asyncio.run(main())
