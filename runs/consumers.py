"""WebSocket doors onto a log of the store: a run's, `/ws/runs/<id>/logs?after=<seq>`
(a preview's and a session exec's are the same door, in their rooms).

Sends `{"type": "entries", "entries": [{seq, stream, text}], "next"}` from the cursor
on, then `{"type": "end", state, reason, exit_code, message}` once what the log belongs to has
ended and every entry is sent, and closes. Refusals close with 4000 + the HTTP status
the API would answer (4404 for a run the caller may not see, whoever's it is), and so
does a socket whose access goes while it is open (accounts.socket_access: 4401 for a
token revoked or expired, 4404 for a person removed from the team, or for a run whose
owner's check no longer lets it in: a session's grant, runs.access.outputs_access_changed).
"""

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import parse_qs

from channels.db import database_sync_to_async

from accounts.access import Actor
from accounts.socket_access import AccessCheckedConsumer
from core.errors import BerthError, Invalid
from logs import logstore
from runs.access import access_run
from runs.models import Run

log = logging.getLogger(__name__)

# Entries per message: few large frames stream far faster than many small ones.
BATCH = 5000
# Signals are only wake-ups, sent without waiting: one lost (its sender died mid-send)
# delays a watcher by this much at most, at the cost of one look per watcher this often.
RECHECK_S = 10.0


class Owner(Protocol):
    """What a socket follows (a run, a session's exec, a session): its public id."""

    public_id: str


class Followed(Owner, Protocol):
    """What a log belongs to (a Run, a session's Exec): its log is the store's files
    under its public id, and its writer writes every entry before its end."""

    state: str
    reason: str
    exit_code: int | None
    message: str

    @property
    def is_active(self) -> bool: ...


class LogConsumer(AccessCheckedConsumer):
    """The one streaming door: a subclass says whose log it is (`authorise`, which
    also sets `access_of`) and how to read its end again (`reload`). A door that
    follows something else of the same owner (a session's state) overrides `pump`."""

    followed_id = ""
    cursor = 0
    group = ""
    pump_task: "asyncio.Task[None] | None" = None
    # Whose access this socket streams on: (team id, actor), set by `authorise`.
    access_of: tuple[int, Actor] | None = None

    async def connect(self) -> None:
        try:
            self.cursor = after_of(self.scope["query_string"])
            self.followed_id = (await database_sync_to_async(self.authorise)()).public_id
        except BerthError as e:
            # Accept first: a close before accepting is an HTTP 403 and the code is lost.
            await self.accept()
            await self.close(code=4000 + e.status)
            return
        self.wake = asyncio.Event()
        # Join before replaying: a signal sent while we replay still wakes the pump.
        self.group = self.group_for(self.followed_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        self.pump_task = self.streaming_task = asyncio.create_task(self.pump())
        assert self.access_of is not None
        team_id, actor = self.access_of
        await self.watch_access(
            team_id, actor.user.pk, actor.token.expires_at if actor.token else None
        )

    def authorise(self) -> Owner:
        """What the socket follows, if its actor may read it."""
        raise NotImplementedError

    def group_for(self, public_id: str) -> str:
        """The channel-layer group whose signals wake the pump: its log's writer's."""
        return logstore.group_name(public_id)

    def reload(self) -> Followed | None:
        """It again, as stored now (None once it is gone)."""
        raise NotImplementedError

    def check_access(self) -> None:
        """Asked again while the socket is open (BerthError when access is gone)."""
        self.authorise()

    async def close_code_now(self) -> int | None:
        if b"authorization" not in dict(self.scope["headers"]):
            self.scope["user"] = await self.current_user()
        try:
            await database_sync_to_async(self.check_access)()
        except BerthError as e:
            return 4000 + e.status
        return None

    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any
    ) -> None:
        pass  # a watcher has nothing to say; whatever it sends is ignored, never parsed

    async def log_signal(self, message: dict[str, Any]) -> None:
        # Only a wake-up: signals that arrive while the pump reads coalesce into the one
        # read after it, and the message's seq is not trusted (the files are the truth).
        self.wake.set()

    async def pump(self) -> None:
        """Replay, then follow until its owner ends.

        1. Re-read the owner's state, then send every stored entry after the cursor.
           State first: the agent writes every entry before the end, so an owner seen
           ended has nothing after what the read that follows returns.
        2. Ended: send `end` and close. Otherwise wait for the next signal. The first
           pass is the replay, and it also ends a log whose owner ended before we
           joined its group (no signal would come).
        """
        try:
            while True:
                self.wake.clear()
                owner = await database_sync_to_async(self.reload)()
                if owner is None:
                    await self.close(code=4404)
                    return
                while frame := await asyncio.to_thread(self.next_frame):
                    await self.send(text_data=frame)
                if not owner.is_active:
                    await self.send_json(
                        {
                            "type": "end",
                            "state": owner.state,
                            "reason": owner.reason,
                            "exit_code": owner.exit_code,
                            "message": owner.message,
                        }
                    )
                    await self.close()
                    return
                # A signal is only a wake-up, sent without waiting: one lost (a process gone
                # mid-send) delays the next look by RECHECK_S, never forever.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), RECHECK_S)
        except Exception:
            log.exception("streaming the log %s failed", self.followed_id)
            await self.close(code=1011)

    def next_frame(self) -> str | None:
        """The next batch after the cursor as one message, or None when caught up.

        Runs on a worker thread: reading and encoding thousands of entries would
        otherwise hold up every other connection on daphne's event loop.
        """
        entries = [
            {"seq": e["seq"], "stream": e["stream"], "text": e["text"]}
            for e in logstore.read(self.followed_id, self.cursor, BATCH)
        ]
        if not entries:
            return None
        self.cursor = entries[-1]["seq"]
        return json.dumps(
            {"type": "entries", "entries": entries, "next": self.cursor}, ensure_ascii=False
        )

    async def disconnect(self, code: int) -> None:
        if self.pump_task is not None:
            self.pump_task.cancel()
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)
        await self.stop_watching_access()


class RunLogConsumer(LogConsumer):
    def authorise(self) -> Run:
        """An agent's bearer token with scope `run`, or a signed-in member of the team:
        the run whose log is followed."""
        actor = self.scope_actor()
        run = access_run(actor, self.scope["url_route"]["kwargs"]["run_id"], "run")
        self.access_of = (run.workspace.team_id, actor)
        return run

    def reload(self) -> Run | None:
        # The log followed is a run's (for a preview: its current process's, as
        # `authorise` found it at connect).
        fields = ("public_id", "state", "reason", "exit_code", "message")
        return Run.objects.only(*fields).filter(public_id=self.followed_id).first()


class StateConsumer(LogConsumer):
    """The log door's access (who, checked again while open) and wake-ups, on the state
    of what it follows instead of a log: sends `{"type": "state", ...}` (`state_now`)
    at once and again at each change, for a page to update itself; once the state is
    one of `final_states` (nothing more will change) it closes. Its group's signals are
    only wake-ups: the row is read again, and every RECHECK_S anyway."""

    final_states: tuple[str, ...] = ()
    last: Mapping[str, Any] | None = None

    def state_now(self) -> Mapping[str, Any] | None:
        """`{"state": ..., ...}` as stored now (None once it is gone)."""
        raise NotImplementedError

    async def pump(self) -> None:
        try:
            while True:
                self.wake.clear()
                now = await database_sync_to_async(self.state_now)()
                if now is None:
                    await self.close(code=4404)
                    return
                if now != self.last:
                    self.last = now
                    await self.send_json({"type": "state", **now})
                if now["state"] in self.final_states:
                    await self.close()
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), RECHECK_S)
        except Exception:
            log.exception("following the state of %s failed", self.followed_id)
            await self.close(code=1011)


def after_of(query_string: bytes) -> int:
    values = parse_qs(query_string.decode("latin-1")).get("after", ["0"])
    try:
        after = int(values[-1])
    except ValueError:
        after = -1
    if after < 0:
        raise Invalid("`after` must be a sequence number (0 or more).")
    return after
