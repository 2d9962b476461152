"""The runner agent's side of a session's exec channel (sandbox/in_image/berth_session.py).

The channel listens on 127.0.0.1:CHANNEL_PORT inside the sandbox's own network
namespace: only a process that enters that namespace reaches it, and on this host that
is the runner agent (sandbox/netns.py creates the socket there on a thread of its own).
One request per connection, one JSON line each way.
"""

import asyncio
import json
from typing import Any

from sandbox import backend
from sandbox.models import Sandbox
from sandbox.netns import Namespace, NamespaceGone, connect

CHANNEL_PORT = 61001
MAX_ANSWER = 1 << 20
TIMEOUT_S = 5.0


class ChannelError(Exception):
    """The channel did not answer (the sandbox is gone, stopping, or not ready yet)."""


def namespace_of(sandbox: Sandbox) -> Namespace:
    """Its namespace, as recorded while it runs, else asked of the engine (and kept)."""
    if sandbox.pid and sandbox.netns:
        return Namespace(sandbox.pid, sandbox.netns)
    pid = backend.sandbox_pid(sandbox.name)
    if pid is None:
        raise ChannelError("the session's container is not running")
    try:
        ns = Namespace.of_pid(pid)
    except NamespaceGone as e:
        raise ChannelError(str(e)) from None
    sandbox.record_pid(ns.pid, ns.inode)
    return ns


async def ask(
    ns: Namespace,
    request: dict[str, Any],
    timeout: float = TIMEOUT_S,
    max_answer: int = MAX_ANSWER,
) -> dict[str, Any]:
    """The channel's answer to one request (of at most `max_answer` bytes)."""
    loop = asyncio.get_running_loop()
    try:
        sock = await connect(ns, CHANNEL_PORT, timeout)
    except (OSError, NamespaceGone, TimeoutError) as e:
        raise ChannelError(f"the exec channel does not answer ({e})") from None
    try:
        async with asyncio.timeout(timeout):
            await loop.sock_sendall(sock, json.dumps(request).encode() + b"\n")
            chunks: list[bytes] = []
            size = 0
            while not chunks or not chunks[-1].endswith(b"\n"):
                chunk = await loop.sock_recv(sock, 1 << 20)
                if not chunk or size > max_answer:
                    raise ChannelError("the exec channel closed without an answer")
                chunks.append(chunk)
                size += len(chunk)
    except (OSError, TimeoutError) as e:
        raise ChannelError(f"the exec channel did not answer ({e})") from None
    finally:
        sock.close()
    answer: dict[str, Any] = json.loads(b"".join(chunks))
    return answer
