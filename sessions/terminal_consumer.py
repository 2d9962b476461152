"""`/ws/terminals/<id>?after=<offset>`: a browser's terminal (docs/sessions.md,
"Terminals"). Daphne holds only this socket; the runner agent of the session's host
carries the bytes (sessions/terminal_relay.py) and the shell lives in the sandbox.

From the browser: {"type": "input", "data": <text>} and {"type": "resize", cols,
rows}. To it: {"type": "attached", start, end, exit}, {"type": "output", data
(base64), end}, {"type": "error", code, message}, {"type": "ended", state, reason,
exit_code}. `end` is how far into the terminal's output the browser has been given;
it reconnects with `after` = the last `end` it saw, and gets only what it missed.

Keystrokes go to the agent's own channel with `channel_layer.send`: a full channel
raises, and the typist is told what was not sent. The agent pings every few seconds;
a socket that hears nothing for WATCHDOG_S attaches again (an agent restarted, a
message lost), from where it got to.
"""

import asyncio
import base64
import contextlib
import logging
import time
from typing import Any

from channels.db import database_sync_to_async
from channels.exceptions import ChannelFull

from accounts.socket_access import AccessCheckedConsumer
from core.errors import BerthError
from runs.consumers import after_of
from sessions.access import access_terminal
from sessions.actions import host_of
from sessions.consumers import HearsSession
from sessions.lifecycle import group_name
from sessions.models import Terminal
from sessions.transcripts import relay_channel

log = logging.getLogger(__name__)

WATCHDOG_S = 15.0
MAX_INPUT = 64 << 10  # one message's keystrokes (a paste): more is refused, said so
BUSY = (
    "Berth's runner agent is not taking keystrokes as fast as they come (its queue is "
    "full), so what you just typed was not sent. Wait a moment, then type it again."
)


class TerminalConsumer(HearsSession, AccessCheckedConsumer):
    term_id = ""
    relay = ""
    session_group = ""
    end = 0
    heard_at = 0.0
    watchdog: "asyncio.Task[None] | None" = None

    def authorise(self) -> Terminal:
        actor = self.scope_actor()
        term = access_terminal(actor, self.scope["url_route"]["kwargs"]["terminal_id"])
        self.actor = actor
        return term

    async def connect(self) -> None:
        try:
            self.end = after_of(self.scope["query_string"])
            term = await database_sync_to_async(self.authorise)()
            self.relay = relay_channel(await database_sync_to_async(host_of)(term.session))
        except BerthError as e:
            await self.accept()  # a close before accepting is an HTTP 403, code lost
            await self.close(code=4000 + e.status)
            return
        self.term_id = term.public_id
        # Its session's changes (a secret granted to a later exec) check access again.
        self.session_group = group_name(term.session.public_id)
        await self.channel_layer.group_add(self.session_group, self.channel_name)
        await self.accept()
        self.heard_at = time.monotonic()
        await self._attach()
        self.watchdog = asyncio.create_task(self._watch())
        actor = self.actor
        await self.watch_access(
            term.session.workspace.team_id,
            actor.user.pk,
            actor.token.expires_at if actor.token else None,
        )

    async def _attach(self, cols: int | None = None, rows: int | None = None) -> None:
        size = {"cols": cols, "rows": rows} if cols and rows else {}
        await self._to_agent(
            {"type": "terminal.attach", "terminal": self.term_id, "after": self.end, **size}
        )

    async def _to_agent(self, message: dict[str, Any]) -> bool:
        try:
            await self.channel_layer.send(self.relay, {**message, "reply": self.channel_name})
            return True
        except ChannelFull:
            await self.send_json({"type": "error", "code": "terminal_busy", "message": BUSY})
            return False

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(WATCHDOG_S / 3)
            if time.monotonic() - self.heard_at > WATCHDOG_S:
                self.heard_at = time.monotonic()
                await self._attach()

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if not isinstance(content, dict):
            return
        kind = content.get("type")
        if kind == "input":
            data = str(content.get("data") or "").encode()
            if len(data) > MAX_INPUT:
                await self.send_json(
                    {
                        "type": "error",
                        "code": "input_too_large",
                        "message": f"One paste is at most {MAX_INPUT // 1024} KiB; "
                        "put larger text in a file (the editor, or write_files).",
                    }
                )
                return
            await self._to_agent({"type": "terminal.input", "data": data})
        elif kind == "resize":
            with contextlib.suppress(TypeError, ValueError):
                cols, rows = int(content["cols"]), int(content["rows"])
                await self._to_agent({"type": "terminal.resize", "cols": cols, "rows": rows})

    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any
    ) -> None:
        if text_data is not None:
            with contextlib.suppress(ValueError):
                await super().receive(text_data=text_data, **kwargs)

    # -- from the agent --------------------------------------------------------------

    async def terminal_attached(self, message: dict[str, Any]) -> None:
        self.heard_at = time.monotonic()
        facts = {k: message.get(k) for k in ("start", "end", "exit")}
        await self.send_json({"type": "attached", **facts, "after": self.end})

    async def terminal_output(self, message: dict[str, Any]) -> None:
        self.heard_at = time.monotonic()
        self.end = int(message["end"])
        data = bytes(message["data"])
        await self.send_json(
            {"type": "output", "data": _b64(data), "end": self.end},
        )

    async def terminal_ping(self, message: dict[str, Any]) -> None:
        self.heard_at = time.monotonic()

    async def terminal_detached(self, message: dict[str, Any]) -> None:
        await asyncio.sleep(0.2)  # the agent or the sandbox is busy: not in a tight loop
        self.heard_at = time.monotonic()
        await self._attach()

    async def terminal_error(self, message: dict[str, Any]) -> None:
        if message.get("code") == "busy":  # the agent let this viewer go: back on
            await self.terminal_detached(message)
        await self.send_json(
            {"type": "error", "code": message.get("code"), "message": _said(message)}
        )

    async def terminal_ended(self, message: dict[str, Any]) -> None:
        facts = {k: message.get(k) for k in ("state", "reason", "exit_code", "session_state")}
        await self.send_json({"type": "ended", **facts})
        await self.close()

    async def session_changed(self, message: dict[str, Any]) -> None:
        self.access_event.set()

    async def close_code_now(self) -> int | None:
        if b"authorization" not in dict(self.scope["headers"]):
            self.scope["user"] = await self.current_user()
        try:
            await database_sync_to_async(self.authorise)()
        except BerthError as e:
            return 4000 + e.status
        return None

    async def disconnect(self, code: int) -> None:
        if self.watchdog is not None:
            self.watchdog.cancel()
        if self.relay and self.term_id:
            with contextlib.suppress(Exception):
                await self.channel_layer.send(
                    self.relay, {"type": "terminal.detach", "reply": self.channel_name}
                )
        if self.session_group:
            await self.channel_layer.group_discard(self.session_group, self.channel_name)
        await self.stop_watching_access()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _said(message: dict[str, Any]) -> str:
    code = message.get("code")
    return {
        "too_many_terminals": "The session has as many terminals as it may hold; close one.",
        "start_failed": "The shell could not start in the session's sandbox.",
        "busy": "The session is not reading keystrokes (frozen or busy) and too many are "
        "waiting: what you typed last was not sent. Wait a moment, then type again.",
    }.get(str(code), f"The terminal could not attach ({code}); it tries again.")
