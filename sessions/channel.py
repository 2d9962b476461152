"""The runner agent's side of a session's exec channel (sandbox/in_image/berth_session.py).

The channel listens on 127.0.0.1:CHANNEL_PORT inside the sandbox's own network
namespace. The runner agent reaches it by entering that namespace (sandbox/netns.py),
but so can any process of the sandbox: so both ends prove a key first, on every
connection (docs/security.md, 32).

- The key is the sandbox's: an HMAC of its id under this host's channel secret (a file
  of its own in DATA_DIR, 0600; not SECRET_KEY, which every process of Berth reads).
- It is handed once, at the first ping after the container started, when no other
  process runs in it yet; the Sandbox row records that it was, before it is handed.
  A row that says keyed is never keyed again (an agent restart derives the same key):
  a channel that cannot prove it is `ChannelUnproven`, and its session ends `lost`.
- Each connection: the agent says hello with a nonce, the channel answers with its own
  and a proof over both; only then does the agent send its request, carrying its own
  proof (the channel serves nothing before it).
"""

import asyncio
import functools
import hashlib
import hmac
import json
import os
import socket
from dataclasses import dataclass
from typing import Any

from core import keys
from sandbox import backend
from sandbox.loop import db
from sandbox.models import Sandbox
from sandbox.netns import Namespace, NamespaceGone, connect
from sessions.frames import HOST_SECRET_STEM
from sessions.lifecycle import lose_unproven

CHANNEL_PORT = 61001
MAX_ANSWER = 1 << 20
MAX_HELLO = 4096
TIMEOUT_S = 5.0
NONCE_BYTES = 16


class ChannelError(Exception):
    """The channel did not answer (the sandbox is gone, stopping, or not ready yet)."""


class ChannelUnproven(ChannelError):
    """The channel answered but could not prove the sandbox's key: nothing is sent to it."""


@functools.cache
def host_secret() -> bytes:
    """This host's channel secret (core.keys.host_key): made here, never shared."""
    return keys.host_key(keys.host_key_file(HOST_SECRET_STEM))


def channel_key(sandbox_id: str) -> bytes:
    """The key of a sandbox's channel: only this host can make it."""
    return hmac.new(
        host_secret(), b"berth.sessions.channel " + sandbox_id.encode(), "sha256"
    ).digest()


def proof(key: bytes, side: bytes, *nonces: str) -> str:
    """As the channel makes and checks it (berth_session.proof)."""
    return hmac.new(key, side + b" " + " ".join(nonces).encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Endpoint:
    """A session sandbox's channel: where it listens, and the key it must prove."""

    ns: Namespace
    sandbox_id: str
    key: bytes


def channel_of(sandbox: Sandbox) -> Endpoint:
    """Its channel, in its namespace as recorded while it runs, else as the engine says."""
    key = channel_key(sandbox.public_id)
    if sandbox.pid and sandbox.netns:
        return Endpoint(Namespace(sandbox.pid, sandbox.netns, sandbox.host), sandbox.public_id, key)
    pid = backend.sandbox_pid(sandbox.name)
    if pid is None:
        raise ChannelError("the session's container is not running")
    try:
        ns = Namespace.of_pid(pid)
    except NamespaceGone as e:
        raise ChannelError(str(e)) from None
    sandbox.record_pid(ns.pid, ns.inode)
    return Endpoint(ns, sandbox.public_id, key)


async def _read_line(sock: socket.socket, limit: int) -> bytes:
    """One answer line; nothing past it is read (the channel sends nothing more unasked)."""
    loop = asyncio.get_running_loop()
    chunks: list[bytes] = []
    size = 0
    while not chunks or not chunks[-1].endswith(b"\n"):
        chunk = await loop.sock_recv(sock, 1 << 20)
        if not chunk or size > limit:
            raise ChannelError("the exec channel closed without an answer")
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _answer(line: bytes) -> dict[str, Any]:
    """A handshake answer; {} for one that is not the channel's (it proves nothing)."""
    try:
        found = json.loads(line)
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


async def _lost(end: Endpoint, why: str) -> ChannelUnproven:
    """Its session ends `lost`: nothing is ever sent to this channel again."""
    await db(lose_unproven)(end.sandbox_id)
    return ChannelUnproven(why)


async def _hello(end: Endpoint, timeout: float) -> tuple[socket.socket, str, dict[str, Any]]:
    """A connection to the channel, the agent's nonce, and the channel's answer to its
    hello (the channel's nonce, whether it has a key, its proof): the first step of every
    exchange. The socket is closed here when that step fails, the caller's after."""
    loop = asyncio.get_running_loop()
    try:
        sock = await connect(end.ns, CHANNEL_PORT, timeout)
    except (OSError, NamespaceGone, TimeoutError) as e:
        raise ChannelError(f"the exec channel does not answer ({e})") from None
    try:
        async with asyncio.timeout(timeout):
            ours = os.urandom(NONCE_BYTES).hex()
            await loop.sock_sendall(
                sock, json.dumps({"op": "hello", "nonce": ours}).encode() + b"\n"
            )
            hello = _answer(await _read_line(sock, MAX_HELLO))
    except (OSError, TimeoutError) as e:
        sock.close()
        raise ChannelError(f"the exec channel did not answer ({e})") from None
    except BaseException:
        sock.close()
        raise
    return sock, ours, hello


async def opened(end: Endpoint, timeout: float = TIMEOUT_S) -> tuple[socket.socket, str]:
    """A connection to a channel that proved its key, and the proof the first request
    must carry. The channel proves first: nothing of the request (env, secrets,
    keystrokes, files) is sent to a channel that cannot."""
    sock, ours, hello = await _hello(end, timeout)
    try:
        theirs = str(hello.get("nonce") or "")
        if not hello.get("keyed"):
            raise await _lost(end, "the exec channel has no key: it restarted, or is not Berth's")
        if not hmac.compare_digest(
            str(hello.get("proof") or ""), proof(end.key, b"channel", ours, theirs)
        ):
            raise await _lost(end, "the exec channel could not prove its key")
    except BaseException:
        sock.close()
        raise
    return sock, proof(end.key, b"agent", ours, theirs)


async def hand_key(end: Endpoint, mark: Any, timeout: float = 1.0) -> bool:
    """The key handed to a channel that has none, once `mark()` recorded on the row that
    it is (before: an agent that dies between the two never keys it again). False when
    the channel has a key already (then `opened` says whether it is the right one)."""
    loop = asyncio.get_running_loop()
    sock, ours, hello = await _hello(end, timeout)
    try:
        if hello.get("keyed") is not False:
            return False
        # Outside the exchange's clock: a slow database must not leave a row marked
        # keyed and a channel without its key (it would then end lost, wrongly).
        if not await mark():
            return False  # keyed once already: never again (`opened` will refuse)
        async with asyncio.timeout(timeout):
            request = {"op": "key", "key": end.key.hex()}
            await loop.sock_sendall(sock, json.dumps(request).encode() + b"\n")
            done = _answer(await _read_line(sock, MAX_HELLO))
        if not hmac.compare_digest(str(done.get("proof") or ""), proof(end.key, b"channel", ours)):
            raise await _lost(end, "the exec channel did not take its key")
        return True
    except (OSError, TimeoutError) as e:
        raise ChannelError(f"the exec channel did not answer ({e})") from None
    finally:
        sock.close()


async def ask(
    end: Endpoint,
    request: dict[str, Any],
    timeout: float = TIMEOUT_S,
    max_answer: int = MAX_ANSWER,
) -> dict[str, Any]:
    """The answer of a proven channel to one request (of at most `max_answer` bytes)."""
    loop = asyncio.get_running_loop()
    sock, mine = await opened(end, timeout)
    try:
        async with asyncio.timeout(timeout):
            await loop.sock_sendall(sock, json.dumps({**request, "proof": mine}).encode() + b"\n")
            line = await _read_line(sock, max_answer)
    except (OSError, TimeoutError) as e:
        raise ChannelError(f"the exec channel did not answer ({e})") from None
    finally:
        sock.close()
    try:
        answer = json.loads(line)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise ChannelError("the exec channel's answer is not a JSON object")
    if answer.get("error") == "unproven":
        raise await _lost(end, "the exec channel refused the agent's proof")
    return answer
