"""The MCP registry: the server object every app's `mcp.py` adds its tools to, and the
tool error carrying the API's error object. The transport (config.mcp) serves it."""

import functools
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, TextContent

from core.errors import BerthError, error_body

Ctx = Context
F = TypeVar("F", bound=Callable[..., Awaitable[Any]])

server: MCPServer = MCPServer(
    "berth",
    title="Berth",
    instructions="Berth is a workspace IDE: each workspace is a Git repository. Read and "
    "write files (one commit per write_files), run commands in a sandbox "
    "(run_command returns the outcome and log), start a preview and fetch its "
    "pages, and ask for a deploy — which only a human reviewer can approve. "
    "Every error says what to do next.",
)


def tool(name: str | None = None) -> Callable[[F], F]:
    """Register an async tool; a BerthError it raises is returned as a tool error with
    the API's error object (`{"error": {code, message, details}}`) as structured content."""

    def decorator(fn: F) -> F:
        @functools.wraps(fn)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return await fn(*args, **kwargs)
            except BerthError as e:
                return tool_error(e.code, e.message, e.details)

        server.add_tool(wrapper, name=name or fn.__name__, description=fn.__doc__)
        return fn

    return decorator


def tool_error(code: str, message: str, details: dict[str, Any] | None = None) -> CallToolResult:
    body = error_body(code, message, details)
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(body))],
        structured_content=body,
        is_error=True,
    )
