"""What the preview gateway skips for a client that repeats itself on a kept connection
(the same request for the same page) and an app that repeats its answer; never the
rules: every request is checked against the caches, counted and sent on rewritten,
every answer written as the header rules made it.

1. A read whose bytes are the connection's last request again, from where a request
   starts, takes what llhttp made of them then (`_replay`, and Upstream._replay for
   answers) instead of a Python call per header.
2. Such a request, with nothing else under way on the connection, is decided again
   from the cache entries its route rested on (Gateway.again: the same entries, within
   their times, the connection cap) and sent on at once (`_repeat`).
3. An app's answer whose bytes are those the connection last had, to the same request
   on the same route, is written as the client was sent it then (Upstream._again).
"""

import logging
from collections import deque

from previews.framing import Exchange, Parsed
from previews.gateway import Gateway, Settled

log = logging.getLogger("berth.previews")


class Repeating:
    """The repeats of previews.relay.Client; its state is the client's."""

    gw: Gateway
    queue: deque[Exchange]
    paused: set[str]
    writing_paused: bool
    parsing: Exchange
    begun: int
    in_head: bool
    settled: Settled | None
    repeated: tuple[Settled | None, bytes]

    def _headed(self, ex: Exchange) -> None:
        raise NotImplementedError

    def _ended(self, ex: Exchange) -> None:
        raise NotImplementedError

    def _head(self, ex: Exchange) -> bytes:
        raise NotImplementedError

    def _refuse(self, status: int, code: str, message: str) -> None:
        raise NotImplementedError

    def _replay(self, parsed: Parsed) -> None:
        """A request whose bytes are those of this connection's last one, which came
        whole in one read and was parsed from where a request starts, as this one is:
        llhttp, a state machine, would make the same of them. So its callbacks' results
        (the Exchange's parsed fields) are taken as they were, and the rest goes on as
        from llhttp's callbacks (`_headed`, `_ended`), or `_repeat`'s shorter way."""
        try:
            if self._repeat(parsed):
                return
            ex = self.parsing = Exchange(parsed)
            self.begun += 1
            self._headed(ex)
            self._ended(ex)
        except Exception as e:  # as llhttp reports a callback's fault (data_received)
            log.error("preview gateway: handling a request failed", exc_info=e)
            self._refuse(
                500, "gateway_error", "The preview gateway failed on this request; try again."
            )

    def _repeat(self, parsed: Parsed) -> bool:
        """A repeated request with nothing else under way on the connection, whose route
        is settled (Gateway.again) and finds an idle connection into the sandbox: sent
        on at once, as `_headed`, `_dispatch`, `_go`, `_send` and `_ended` would send it
        (a Parsed has no body, no Expect and no upgrade). False, with nothing done: the
        request goes the whole way."""
        settled = self.settled
        if (
            settled is None
            or settled[0] is not parsed
            or self.queue
            or self.paused
            or self.writing_paused
        ):
            return False
        gw = self.gw
        route = gw.again(settled)
        if route is None:
            return False
        upstream = gw.take(route.key)
        if upstream is None:
            return False
        ex = self.parsing = Exchange(parsed)
        self.begun += 1
        self.queue.append(ex)
        ex.route = route
        assert route.target is not None
        gw.opened(route.target)
        ex.counted = True
        ex.upstream = upstream
        upstream.start(self, ex)  # reading: kept connections are (Upstream.reusable)
        head = self.repeated
        if head[0] is not settled:  # made of the request, the route's kind and the peer
            head = self.repeated = (settled, self._head(ex))
        upstream.transport.write(head[1])
        ex.ended = True
        self.in_head = True
        return True
