"""Kept threads for Django's requests under daphne.

Django's ASGI handler runs a request's sync code (its views, the ORM) on a thread of
the request's own: one is made for every request, and joined by yet another thread
once it ends. On a small machine that churn cost about a millisecond of CPU a request,
and each new thread starts with no database connection objects of its own. Here each
request borrows a single-thread executor from a pool instead (asgiref's
`ThreadSensitiveContext(executor=...)`, whose caller owns the executor), so Django's
own per-request context finds one already set and adds nothing. A request keeps its
thread from start to end, as before: thread-sensitive code never changes threads in
the middle of a request.

When every kept executor is lent out (many long waits at once), a request gets a new
one, which is retired after it, its database connections closed on its own thread.
"""

import concurrent.futures
from typing import Any

from asgiref.sync import ThreadSensitiveContext
from django.db import connections

KEPT = 16


class RequestThreads:
    def __init__(self, app: Any, kept: int = KEPT) -> None:
        self.app, self.kept = app, kept
        self.idle: list[concurrent.futures.ThreadPoolExecutor] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        executor = (
            self.idle.pop()
            if self.idle
            else concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="request")
        )
        try:
            async with ThreadSensitiveContext(executor=executor):
                await self.app(scope, receive, send)
        finally:
            # A sync call a cancelled request left running finishes first: the next
            # request's calls queue behind it on the one thread.
            if len(self.idle) < self.kept:
                self.idle.append(executor)
            else:
                executor.submit(connections.close_all)
                executor.shutdown(wait=False)
