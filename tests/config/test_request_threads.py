"""config.request_threads: a request's sync code runs on one thread from start to end;
requests after it reuse that thread; requests at the same time never share one."""

import asyncio
import threading

from asgiref.sync import async_to_sync, sync_to_async

from config.request_threads import RequestThreads
from tests.support.servers import wait_for_async


class App:
    """An ASGI app whose request makes two thread-sensitive sync calls, optionally
    waiting in between until `release` is set."""

    def __init__(self) -> None:
        self.seen: list[tuple[threading.Thread, threading.Thread]] = []
        self.firsts: list[threading.Thread] = []
        self.release: asyncio.Event | None = None

    async def __call__(self, scope, receive, send) -> None:
        first = await sync_to_async(threading.current_thread)()
        self.firsts.append(first)
        if self.release is not None:
            await self.release.wait()
        second = await sync_to_async(threading.current_thread)()
        self.seen.append((first, second))


def http() -> dict:
    return {"type": "http", "path": "/"}


def test_requests_one_after_another_reuse_one_kept_thread() -> None:
    app = App()
    threads = RequestThreads(app, kept=2)

    async def three() -> None:
        for _ in range(3):
            await threads(http(), None, None)

    async_to_sync(three)()
    assert len(app.seen) == 3
    assert all(first == second for first, second in app.seen)  # never moved mid-request
    assert len({first for first, _ in app.seen}) == 1
    assert app.seen[0][0] is not threading.current_thread()
    assert len(threads.idle) == 1


def test_requests_at_once_never_share_a_thread_and_extra_ones_retire() -> None:
    app = App()
    threads = RequestThreads(app, kept=2)

    async def at_once() -> None:
        app.release = asyncio.Event()
        tasks = [asyncio.ensure_future(threads(http(), None, None)) for _ in range(4)]
        await wait_for_async(
            lambda: len(app.firsts) >= 4,
            interval=0.001,
            what="all four to be in the middle of their request",
        )
        app.release.set()
        await asyncio.gather(*tasks)

    async_to_sync(at_once)()
    assert len(app.seen) == 4
    assert all(first == second for first, second in app.seen)
    assert len({first for first, _ in app.seen}) == 4
    assert len(threads.idle) == 2  # two kept; the other two were retired
