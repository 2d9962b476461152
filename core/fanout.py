"""Wake-up signals to channel-layer groups: sent from sync code without waiting for
them (`group_send`), and listened for by async code (`listening`).

Every signal Berth sends ("run X has entries up to N", "activity row N") is only a
wake-up: readers re-read the files or rows themselves, and re-check on their own after
a short while, so a signal that is late or lost delays nothing past that. Sending one
with `async_to_sync` cost a fresh event loop, and with it a fresh Redis connection, on
every call (3-5 ms, in the middle of a request or of a run's start). Here they go
through one long-lived event loop per process, on a thread of its own, and the caller
goes on at once. Pending sends are given a moment to go out when the process exits.
"""

import asyncio
import atexit
import concurrent.futures
import contextlib
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from channels.layers import DEFAULT_CHANNEL_LAYER, channel_layers, get_channel_layer

log = logging.getLogger(__name__)

EXIT_DRAIN_S = 2.0
SEND_TIMEOUT_S = 5.0  # a stalled Redis must not pile sends up behind it
MAX_PENDING = 10_000  # past this, new signals are dropped (and said so): readers re-check

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_loop_pid = 0
_pending: set[concurrent.futures.Future[Any]] = set()


def _sender_loop() -> asyncio.AbstractEventLoop:
    """This process's sending loop, started on first use (and again after a fork: a
    child inherits the variable, never the thread)."""
    global _loop, _loop_pid
    with _lock:
        if _loop is None or _loop_pid != os.getpid():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="channel-signals", daemon=True).start()
            if _loop is None:
                atexit.register(drain)
            _loop, _loop_pid = loop, os.getpid()
            _pending.clear()
        return _loop


def group_send(group: str, message: dict[str, Any]) -> None:
    """Send `message` to `group` soon; never raises (a failure is logged)."""
    layer = get_channel_layer()
    if layer is None:
        return
    loop = _sender_loop()
    with _lock:
        if len(_pending) >= MAX_PENDING:
            log.warning(
                "channel-layer signal to %s dropped: %d still pending", group, len(_pending)
            )
            return
        future = asyncio.run_coroutine_threadsafe(
            asyncio.wait_for(layer.group_send(group, message), SEND_TIMEOUT_S), loop
        )
        _pending.add(future)
    future.add_done_callback(_sent)


def channel_send(channel: str, message: dict[str, Any]) -> None:
    """Send `message` to one channel soon (a process's own, such as a runner agent's),
    as `group_send` does; never raises (a failure, a full channel included, is logged:
    a caller that must know awaits the layer's `send` itself)."""
    layer = get_channel_layer()
    if layer is None:
        return
    loop = _sender_loop()
    with _lock:
        future = asyncio.run_coroutine_threadsafe(
            asyncio.wait_for(layer.send(channel, message), SEND_TIMEOUT_S), loop
        )
        _pending.add(future)
    future.add_done_callback(_sent)


def _after_fork_in_child() -> None:
    """A child inherits the variables, never the sending thread (nor a lock another
    thread held): it starts afresh on first use."""
    global _lock, _loop, _wait_layer
    _lock = threading.Lock()
    _loop = None
    _wait_layer = None
    _pending.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _sent(future: concurrent.futures.Future[Any]) -> None:
    with _lock:
        _pending.discard(future)
    if not future.cancelled() and future.exception() is not None:
        log.warning("channel-layer signal not sent: %r", future.exception())


def drain(timeout: float = EXIT_DRAIN_S) -> None:
    """Wait (up to `timeout`) for the signals already asked for to go out."""
    with _lock:
        pending = list(_pending)
    if pending:
        concurrent.futures.wait(pending, timeout)


_wait_layer: Any = None


def _layer_for_waits() -> Any:
    """A channel layer of the sending loop's own: one layer receives on one event loop
    at a time, and daphne's loop receives on the shared one."""
    global _wait_layer
    with _lock:
        if _wait_layer is None and get_channel_layer() is not None:
            _wait_layer = channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)
        return _wait_layer


def wait(groups: Sequence[str], done: Callable[[], bool], seconds: float, recheck: float) -> bool:
    """From sync code (a request's thread): until `done()` — looked at first, at each
    signal to one of `groups` and every `recheck` s — or `seconds` pass; whether it is.
    The listening runs on the sending loop. Without a channel layer (or with Redis
    down) it looks every `recheck` s: slower, never wrong."""
    deadline = time.monotonic() + seconds
    if done() or seconds <= 0:
        return done()
    layer, loop = _layer_for_waits(), _sender_loop()

    def run(coro: Any, timeout: float) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout)

    channel = joined = None
    try:
        if layer is not None:
            channel = joined = run(layer.new_channel(), SEND_TIMEOUT_S)
            for group in groups:
                run(layer.group_add(group, channel), SEND_TIMEOUT_S)
    except Exception as e:
        log.warning("waiting without signals (channel layer: %r)", e)
        channel = None
    try:
        while not done():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            step = min(left, recheck)
            if channel is None:
                time.sleep(step)  # no signal can come: look again after a while
                continue
            try:
                run(asyncio.wait_for(layer.receive(channel), step), step + SEND_TIMEOUT_S)
            except (TimeoutError, concurrent.futures.TimeoutError):
                pass
            except Exception as e:
                log.warning("waiting without signals from now (channel layer: %r)", e)
                joined, channel = channel, None
        return True
    finally:
        if joined is not None:
            for group in groups:  # not waited for: the group's entry expires on its own
                asyncio.run_coroutine_threadsafe(layer.group_discard(group, joined), loop)


@contextlib.asynccontextmanager
async def listening(*groups: str) -> AsyncIterator[Callable[[float], Awaitable[Any]]]:
    """Within the block, a member of `groups` (joined on entry, so nothing sent after
    that is missed): yields `next_signal(timeout)`, the next message, or None once
    `timeout` seconds pass without one. Raises on entry if there is no channel layer."""
    layer = get_channel_layer()
    if layer is None:
        raise RuntimeError("no channel layer is configured")
    channel = await layer.new_channel()
    for group in groups:
        await layer.group_add(group, channel)

    async def next_signal(timeout: float) -> Any:
        try:
            return await asyncio.wait_for(layer.receive(channel), timeout)
        except TimeoutError:
            return None

    try:
        yield next_signal
    finally:
        for group in groups:
            with contextlib.suppress(Exception):  # the group's entry expires on its own
                await layer.group_discard(group, channel)
