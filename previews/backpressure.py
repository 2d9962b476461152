"""Flow control for streamed preview answers under daphne.

ASGI has no backpressure: daphne writes every body chunk it is given into Twisted's
buffer at once, so a fast app and a slow browser would pile a whole response up in
Berth's memory. Twisted itself knows when its buffer is full: it pauses a registered
push producer. We register one on daphne's request and wait while it is paused, so
the proxy holds at most about one socket buffer per response. Under another ASGI
server (no Twisted request behind `send`) this does nothing.
"""

import asyncio
import functools
from typing import Any

from twisted.internet.interfaces import IPushProducer
from zope.interface import implementer


@implementer(IPushProducer)
class Backpressure:
    def __init__(self, request: Any = None) -> None:
        self.request = request
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.gone = False  # the client went away: stop reading the app's answer
        if request is not None:
            request.registerProducer(self, True)

    @classmethod
    def of(cls, send: Any) -> "Backpressure":
        """For daphne's `send` (functools.partial(server.handle_reply, request)), or a
        wrapper of it that names it in `__wrapped__`."""
        send = getattr(send, "__wrapped__", send)
        request = send.args[0] if isinstance(send, functools.partial) and send.args else None
        if (
            request is None
            or not hasattr(request, "registerProducer")
            or getattr(request, "producer", None) is not None
        ):
            return cls()
        return cls(request)

    # IPushProducer, called by Twisted on the event loop's thread
    def pauseProducing(self) -> None:
        self.flowing.clear()

    def resumeProducing(self) -> None:
        self.flowing.set()

    def stopProducing(self) -> None:
        self.gone = True
        self.flowing.set()

    async def wait(self) -> None:
        await self.flowing.wait()

    def release(self) -> None:
        """Before the last chunk: daphne finishes the request with it."""
        if self.request is not None:
            self.request.unregisterProducer()
            self.request = None
