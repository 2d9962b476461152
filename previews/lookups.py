"""What a preview or release host names, and the database's answers about it, cached
briefly: the routing rules of both processes that take part in serving those hosts
(the preview gateway and the web process's deciding door, previews.decide). One
instance per process; nothing here opens a connection to a sandbox.
"""

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings

from core import fanout
from previews import gate
from previews.models import Preview
from sessions.models import Session

log = logging.getLogger("berth.previews")

TARGET_TTL_S = 1.0
TOUCH_EVERY_S = 1.0
# A request to a preview of a session is the session's activity: written at most this
# often per session (its idle clocks count in seconds to minutes).
SESSION_TOUCH_EVERY_S = 5.0


class Lookups:
    """Host names to previews and releases, targets, viewers; counts of open requests."""

    def __init__(self) -> None:
        self.host_re = re.compile(
            r"^([a-z0-9]{1,12})\." + re.escape(settings.PREVIEW_DOMAIN) + r"(?::\d{1,5})?$"
        )
        # `<workspace>--<team>.APPS_DOMAIN`: slugs have single hyphens only, so "--" splits.
        self.release_re = re.compile(
            r"^([a-z0-9-]{1,30})--([a-z0-9-]{1,30})\."
            + re.escape(settings.APPS_DOMAIN)
            + r"(?::\d{1,5})?$"
        )
        self.routes: dict[tuple[str, str], tuple[float, str | None]] = {}
        self.targets: dict[str, tuple[float, gate.Target | None]] = {}
        self.pending: dict[str, asyncio.Future[gate.Target | None]] = {}
        # The generation each pending target lookup started in (`generation`).
        self.pending_since: dict[str, int] = {}
        # Bumped by every `drop`. A lookup notes it before it reads the database and
        # caches its answer only if no drop came meanwhile: one that began before a
        # grant or a revocation may have read the world before it, and would otherwise
        # store that old answer over the drop for a whole cache time.
        self.generation = 0
        # (preview, cookie) -> (when looked up, whether it lets its holder in). Dropped
        # at once when told (`drop`: a grant, a revocation, a member removed); the
        # PREVIEW_VIEWER_TTL_S bound is the backstop for a signal that was lost.
        self.viewers: dict[tuple[str, str], tuple[float, bool]] = {}
        # Who is behind each cookie in `viewers` (person, token), to drop theirs; and why
        # a refused one is refused (gate's close codes).
        self.holders: dict[str, tuple[int | None, int | None]] = {}
        self.refused: dict[tuple[str, str], int] = {}
        self.viewer_ttl = float(settings.PREVIEW_VIEWER_TTL_S)
        self.touched: dict[int, float] = {}
        self.sessions_touched: dict[str, float] = {}
        self.open: dict[str, int] = {}
        # Read once: Django's settings object costs a lookup per attribute per request.
        self.guard = settings.PREVIEW_CROSS_SITE_GUARD
        # Behind a TLS proxy (BEHIND_TLS_PROXY) every request came in over https.
        self.tls = bool(getattr(settings, "SECURE_PROXY_SSL_HEADER", None))

    def preview_of(self, host: str) -> str | None:
        m = self.host_re.match(host)
        return m.group(1) if m else None

    def release_of(self, host: str) -> tuple[str, str] | None:
        m = self.release_re.match(host)
        return (m.group(1), m.group(2)) if m else None

    async def route(self, key: tuple[str, str]) -> str | None:
        """The release process a release host points at, as of at most TARGET_TTL_S ago
        (the previous process outlives a switch by RELEASE_DRAIN_S, so a request on its
        way there still lands)."""
        now = time.monotonic()
        cached = self.routes.get(key)
        if cached and now - cached[0] < TARGET_TTL_S:
            return cached[1]
        public_id = await database_sync_to_async(gate.routed_process)(*key)
        if len(self.routes) > 10_000:
            self.routes.clear()
        self.routes[key] = (now, public_id)
        return public_id

    async def target(self, public_id: str, fresh: bool = False) -> gate.Target | None:
        """The preview as of at most TARGET_TTL_S ago. One lookup at a time per preview:
        requests arriving meanwhile wait for it instead of each asking the database
        (not one begun before a drop of the preview: `drop` forgets it)."""
        now = time.monotonic()
        cached = self.targets.get(public_id)
        if cached and not fresh and now - cached[0] < TARGET_TTL_S:
            return cached[1]
        pending = self.pending.get(public_id)
        if pending is None:
            pending = asyncio.ensure_future(database_sync_to_async(gate.target)(public_id))
            self.pending[public_id] = pending
            self.pending_since[public_id] = self.generation
            pending.add_done_callback(lambda done: self._settled(public_id, done))
        since = self.pending_since[public_id]
        t = await asyncio.shield(pending)
        self.remember_target(t, public_id, now, since)
        return t

    def _settled(self, public_id: str, done: asyncio.Future[gate.Target | None]) -> None:
        # Only its own entry: a drop may have put a newer lookup of the preview there.
        if self.pending.get(public_id) is done:
            del self.pending[public_id]
            del self.pending_since[public_id]

    def remember_target(
        self, t: gate.Target | None, public_id: str, now: float, since: int
    ) -> None:
        """`t`, looked up from generation `since` on: cached unless a drop came since."""
        if since != self.generation:
            return
        if len(self.targets) > 10_000:
            self.targets.clear()
        before = self.targets.get(public_id)
        if t is not None and before and before[1] is not None and before[1].secrets != t.secrets:
            # Its session was granted a secret since: every viewer answer was given
            # against the old grants (a lost signal, or a lookup that raced the grant's).
            self.drop(previews={public_id})
        self.targets[public_id] = (now, t)

    async def viewer(self, value: str | None, t: gate.Target, since: int) -> bool:
        """Whether a preview cookie's holder may see `t` (cached PREVIEW_VIEWER_TTL_S).
        `since`: the generation noted before `t` was looked up, which the answer rests
        on as much as on the viewer's own rows."""
        if not value:
            return False
        cached = self.viewers.get((t.public_id, value))
        if cached and time.monotonic() - cached[0] < self.viewer_ttl:
            return cached[1]
        standing = await database_sync_to_async(gate.viewer_standing)(value, t)
        self.remember_viewer(t.public_id, value, standing.code, since)
        return standing.code is None

    def remember_viewer(self, public_id: str, value: str, code: int | None, since: int) -> None:
        """A viewer's answer: let in (`code` None), or refused with `code`; decided from
        generation `since` on, and so not cached if a drop came since (the next request
        asks the database again)."""
        if since != self.generation:
            return
        if len(self.viewers) > 10_000 or len(self.holders) > 10_000:
            self.viewers.clear()
            self.holders.clear()
            self.refused.clear()
        key = (public_id, value)
        self.viewers[key] = (time.monotonic(), code is None)
        if value not in self.holders:
            self.holders[value] = gate.cookie_holder(value)
        if code is None:
            self.refused.pop(key, None)
        else:
            self.refused[key] = code

    def drop(
        self, previews: Collection[str] = (), user: int | None = None, token: int | None = None
    ) -> None:
        """Forget the targets of `previews` and every viewer answer about them, and every
        answer about a cookie of `user` or `token`: the next request is decided anew.
        A lookup under way now stores nothing (`generation`), and a request after this
        one never waits on a target lookup begun before it."""
        self.generation += 1
        for public_id in previews:
            self.targets.pop(public_id, None)
            if self.pending.pop(public_id, None) is not None:
                del self.pending_since[public_id]
        cookies = {
            value
            for value, (u, tok) in self.holders.items()
            if (user is not None and u == user) or (token is not None and tok == token)
        }
        for key in [k for k in self.viewers if k[0] in previews or k[1] in cookies]:
            self.viewers.pop(key, None)
            self.refused.pop(key, None)
        for value in cookies:
            self.holders.pop(value, None)

    def told(self, message: dict[str, Any]) -> set[str]:
        """A `viewers.drop` message heard on gate.VIEWERS_GROUP, applied; the previews
        it named."""
        previews = {str(p) for p in message.get("previews") or ()}
        user, token = message.get("user"), message.get("token")
        self.drop(
            previews,
            user if isinstance(user, int) else None,
            token if isinstance(token, int) else None,
        )
        return previews

    async def follow(
        self,
        groups: tuple[str, ...],
        handle: Callable[[dict[str, Any]], Awaitable[None]],
        stop: asyncio.Event | None = None,
    ) -> None:
        """Hand each message sent to `groups` to `handle`, until `stop`; a channel layer
        that goes away is joined again a second later (what is missed meanwhile, the
        caches' times bound)."""
        while stop is None or not stop.is_set():
            try:
                async with fanout.listening(*groups) as next_signal:
                    while stop is None or not stop.is_set():
                        message = await next_signal(1.0)
                        if message:
                            await handle(message)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("previews: not hearing %s, again in 1 s: %r", groups, e)
                await asyncio.sleep(1)

    async def touch(self, t: gate.Target) -> None:
        """The idle clock: at most one write a second per preview, and one every
        SESSION_TOUCH_EVERY_S per session for a preview of one."""
        now = time.monotonic()
        if now - self.touched.get(t.pk, 0) >= TOUCH_EVERY_S:
            self.touched[t.pk] = now
            await database_sync_to_async(Preview.record_request)(t.pk)
        if t.session and now - self.sessions_touched.get(t.session, 0) >= SESSION_TOUCH_EVERY_S:
            await self.touch_session(t.session, now)

    async def touch_session(self, public_id: str, now: float) -> None:
        if len(self.sessions_touched) > 10_000:
            self.sessions_touched.clear()
        self.sessions_touched[public_id] = now
        await database_sync_to_async(Session.touch_by_id)(public_id)

    def forget_session(self, public_id: str) -> list[str]:
        """A session is being frozen: its previews are looked up afresh from now on
        (the lookup says it is freezing). The public ids of those previews."""
        previews = [
            key
            for key, (_, t) in list(self.targets.items())
            if t is not None and t.session == public_id
        ]
        for key in previews:
            self.targets.pop(key, None)
        return previews
