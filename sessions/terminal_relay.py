"""The runner agent's side of terminals: every byte between a browser's socket (held by
daphne, sessions/terminal_consumer.py) and a shell held by the exec channel inside the
sandbox (berth_pty.py), and the masked transcript of each.

Daphne sends keystrokes, resizes, attaches and detaches to this agent's own channel
(`transcripts.relay_channel`: `channel_layer.send`, so a full channel is an error the
typist sees, never a silent drop). Each attached viewer gets a connection of its own
into the sandbox, and its output goes straight back to that viewer's channel: not
through the log store, not through a group. A viewer that falls behind (its channel
full for SEND_PATIENCE_S) is dropped and attaches again from where it got to, which
the channel replays.

Each open terminal also has a recorder here: one more attachment whose output, masked,
goes to its transcript on the web host (sessions.recorder, sessions.transcripts),
resumed after an agent restart from where the web host's transcript is (so nothing is
recorded twice).
"""

import asyncio
import base64
import contextlib
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from channels.exceptions import ChannelFull
from channels.layers import get_channel_layer
from django.conf import settings

from runs import secrets
from sandbox.loop import EngineLoop, db, on_thread
from sandbox.webapi import WebRefused, WebUnavailable
from sessions.channel import ChannelError, ask, channel_of, opened
from sessions.models import Session, SessionState, Terminal, TerminalState
from sessions.recorder import Gone, Upload
from sessions.transcripts import relay_channel

log = logging.getLogger("berth.runner_agent")

PING_S = 5.0  # a viewer that hears nothing for 3 of these attaches again
SEND_PATIENCE_S = 2.0
READY_WAIT_S = 120.0  # a terminal opened on a starting session waits this long for it
TOUCH_EVERY_S = 1.0
MAX_LINE = 1 << 20
MAX_QUEUED = 1 << 20  # keystrokes waiting for the sandbox, per viewer


@dataclass
class Attachment:
    """One connection into the sandbox onto a terminal: a viewer's, or its recorder's."""

    terminal: str
    reply: str = ""  # the viewer's channel; "" for the recorder
    writer: asyncio.StreamWriter | None = None
    early: list[dict[str, Any]] = field(default_factory=list)  # input before it was up
    early_bytes: int = 0
    masker: secrets.StreamMasker = field(default_factory=lambda: secrets.Masker([]).stream())
    names: list[str] = field(default_factory=list)  # the session's secrets it masks
    session_pk: int = 0
    task: "asyncio.Task[None] | None" = None

    def write(self, line: dict[str, Any]) -> bool:
        """Queued for the sandbox; False when that would pass MAX_QUEUED (the session
        not reading: attaching, or paused): the viewer is then dropped, never the host's
        memory."""
        data = json.dumps(line).encode() + b"\n"
        if self.writer is None:
            self.early.append(line)
            self.early_bytes += len(data)
            return self.early_bytes <= MAX_QUEUED
        self.writer.write(data)
        return self.writer.transport.get_write_buffer_size() <= MAX_QUEUED


def _load(public_id: str) -> Terminal | None:
    return (
        Terminal.objects.select_related("session__workspace", "session__run__sandbox")
        .filter(public_id=public_id)
        .first()
    )


def _masker_of(session: Session) -> tuple[list[str], secrets.StreamMasker]:
    # Sealed for this host when they were granted (sessions.models.Session.grant).
    return list(session.secret_names), secrets.Masker(
        secrets.open_sealed(session.secrets_sealed)
    ).stream()


def _open_here() -> list[Terminal]:
    # Asked first of the one table: the query below, of four joined tables, cost about
    # a millisecond a second with no terminal open anywhere (issue 32).
    if not Terminal.objects.filter(state=TerminalState.OPEN).exists():
        return []
    return list(
        Terminal.objects.select_related("session__workspace", "session__run__sandbox").filter(
            state=TerminalState.OPEN,
            session__state=SessionState.READY,
            session__run__sandbox__host=settings.SANDBOX_HOST,
        )
    )


class TerminalRelay:
    def __init__(self, engine_loop: EngineLoop, thaw: Any) -> None:
        self.engine = engine_loop
        self.thaw = thaw  # the keeper's: a frozen session resumes for its terminal
        self.viewers: dict[str, Attachment] = {}
        self.recorders: dict[str, Attachment] = {}
        self.touched: dict[int, float] = {}
        self.layer = get_channel_layer()

    def jobs(self, stop: asyncio.Event) -> list["asyncio.Task[None]"]:
        every = self.engine.every
        return [
            asyncio.create_task(self.listen(stop)),
            asyncio.create_task(every(PING_S, self.ping, stop)),
            asyncio.create_task(every(1.0, self.record_all, stop)),
        ]

    async def listen(self, stop: asyncio.Event) -> None:
        channel = relay_channel(settings.SANDBOX_HOST)
        while not stop.is_set():
            try:
                message = await self.layer.receive(channel)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("terminals: receiving failed, again in 1 s: %s", e)
                await asyncio.sleep(1)
                continue
            try:
                self.handle(message)
            except Exception:
                log.exception("terminals: a message was dropped")

    def handle(self, message: dict[str, Any]) -> None:
        """In order, without waiting: keystrokes keep the order they were typed in."""
        kind, reply = message.get("type"), str(message.get("reply") or "")
        viewer = self.viewers.get(reply)
        if kind == "terminal.input" and viewer is not None:
            data = base64.b64encode(bytes(message.get("data") or b"")).decode()
            if not viewer.write({"i": data}):
                self._drop(reply)
                self.engine.spawn(self.send(reply, {"type": "terminal.error", "code": "busy"}))
            self._activity(viewer)
        elif kind == "terminal.resize" and viewer is not None:
            viewer.write({"r": [int(message.get("cols") or 80), int(message.get("rows") or 24)]})
        elif kind in ("terminal.input", "terminal.resize"):
            self.engine.spawn(self.send(reply, {"type": "terminal.detached"}))
        elif kind == "terminal.attach":
            self._drop(reply)
            viewer = self.viewers[reply] = Attachment(str(message.get("terminal")), reply)
            viewer.task = asyncio.create_task(self._view(viewer, message))
        elif kind == "terminal.detach":
            self._drop(reply)
        elif kind == "terminal.close":
            self.engine.spawn(self.engine.safely(lambda: self._close(str(message["terminal"]))))

    def _drop(self, reply: str) -> None:
        viewer = self.viewers.pop(reply, None)
        if viewer is not None and viewer.task is not None:
            viewer.task.cancel()

    def _activity(self, viewer: Attachment) -> None:
        """Terminal input is activity (its idle clock), said at most every second."""
        now = time.monotonic()
        if now - self.touched.get(viewer.session_pk, 0.0) >= TOUCH_EVERY_S:
            self.touched[viewer.session_pk] = now
            pk = viewer.session_pk
            self.engine.spawn(self.engine.safely(lambda: self._touch(pk)))

    async def _touch(self, pk: int) -> None:
        session = await db(Session.objects.select_related("run__sandbox").get)(pk=pk)
        await db(session.touch)()
        if session.state in (SessionState.FREEZING, SessionState.FROZEN):
            await self.thaw(session)

    async def send(self, reply: str, message: dict[str, Any]) -> bool:
        """To a viewer's channel; False once it stayed full for SEND_PATIENCE_S."""
        deadline = time.monotonic() + SEND_PATIENCE_S
        wait = 0.01
        while True:
            try:
                await self.layer.send(reply, message)
                return True
            except ChannelFull:
                if time.monotonic() > deadline:
                    return False
                await asyncio.sleep(wait)
                wait = min(wait * 2, 0.2)

    async def mask_grants(self, session: Session) -> None:
        """A secret new to the session is about to be handed to one of its execs: every
        terminal of it masks it from now on (called by the keeper before the exec runs,
        as the exec follower learns of it)."""
        attachments = [
            a
            for a in [*self.viewers.values(), *self.recorders.values()]
            if a.session_pk == session.pk
        ]
        if not attachments:
            return
        fresh = await db(Session.objects.get)(pk=session.pk)
        names, masker = await db(_masker_of)(fresh)
        for attachment in attachments:
            if attachment.names != names:
                held = attachment.masker.pending  # carried over: nothing is skipped
                attachment.names = names
                attachment.masker = secrets.StreamMasker(masker.raw)
                attachment.masker.pending = held

    async def ping(self) -> None:
        for reply, viewer in list(self.viewers.items()):
            if viewer.writer is not None and not await self.send(reply, {"type": "terminal.ping"}):
                self._drop(reply)

    # -- one viewer ----------------------------------------------------------------

    async def _view(self, viewer: Attachment, message: dict[str, Any]) -> None:
        reply = viewer.reply
        try:
            term = await self._ready_terminal(viewer.terminal, reply)
            if term is None:
                return
            viewer.session_pk = term.session_id
            viewer.names, viewer.masker = await db(_masker_of)(term.session)
            reader = await self._attach(term, viewer, message.get("after"), message)
            if reader is None:
                return
            await self._pump(term, viewer, reader)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("terminal %s: its viewer stopped", viewer.terminal)
            await self.send(reply, {"type": "terminal.detached"})
        finally:
            if viewer.writer is not None:
                viewer.writer.close()
            if self.viewers.get(reply) is viewer:
                del self.viewers[reply]

    async def _ready_terminal(self, public_id: str, reply: str) -> Terminal | None:
        """The terminal, once its session is ready (thawed if frozen; waited for while
        it starts); None after telling the viewer why not."""
        deadline = time.monotonic() + READY_WAIT_S
        while True:
            term = await db(_load)(public_id)
            if term is None or not term.is_open or term.run_id != term.session.run_id:
                if term is not None and term.is_open:
                    await db(term.end)(TerminalState.CLOSED, "session_stopped")
                await self.send(reply, _ended(term))
                return None
            session = term.session
            if session.state in (SessionState.FREEZING, SessionState.FROZEN):
                await self.thaw(session)
            elif session.state == SessionState.READY:
                return term
            elif session.state != SessionState.STARTING or time.monotonic() > deadline:
                await self.send(reply, _ended(term))
                return None
            await asyncio.sleep(0.2)

    async def _attach(
        self,
        term: Terminal,
        into: Attachment,
        after: Any,
        size: dict[str, Any],
    ) -> asyncio.StreamReader | None:
        """A connection onto the terminal's stream from `after`; the first answer is
        told to the viewer (a recorder keeps it). Whichever attaches first starts its
        shell: an open terminal of the session's current start has one, or is new."""
        assert term.session.run is not None and term.session.run.sandbox is not None
        # A channel that proved its key (else its session is lost: ChannelUnproven).
        sock, mine = await opened(await on_thread(channel_of)(term.session.run.sandbox))
        reader, writer = await asyncio.open_connection(sock=sock, limit=MAX_LINE)
        request = {
            "proof": mine,
            "op": "pty_attach",
            "id": term.public_id,
            "after": int(after or 0),
            "cols": size.get("cols"),
            "rows": size.get("rows"),
        }
        writer.write(json.dumps(request).encode() + b"\n")
        first = json.loads(await reader.readline() or b"{}")
        if not first.get("ok"):
            writer.close()
            if into.reply:
                await self.send(
                    into.reply,
                    {"type": "terminal.error", "code": str(first.get("error") or "no_answer")},
                )
            return None
        into.writer = writer
        for line in into.early:
            into.write(line)
        into.early.clear()
        into.early_bytes = 0
        if into.reply:
            await self.send(into.reply, {"type": "terminal.attached", **_facts(first)})
        return reader

    async def _pump(self, term: Terminal, viewer: Attachment, reader: asyncio.StreamReader) -> None:
        while line := await reader.readline():
            message = json.loads(line)
            if "o" in message:
                raw = base64.b64decode(message["o"])
                shown = viewer.masker.feed(raw)
                end = int(message["at"]) + len(raw) - viewer.masker.held
                if shown and not await self.send(
                    viewer.reply, {"type": "terminal.output", "data": shown, "end": end}
                ):
                    return  # too far behind: it attaches again, from `end`
            elif "x" in message:
                await _exited(term, message)
                await self.send(viewer.reply, {**_ended(term), "exit_code": message["x"]})
                return
        # The connection ended without an exit: the container stopping, or the channel
        # cutting off a viewer that fell behind. It attaches again (or learns the end).
        await self.send(viewer.reply, {"type": "terminal.detached"})

    async def _close(self, public_id: str) -> None:
        term = await db(_load)(public_id)
        if term is None or term.session.run is None or term.session.run.sandbox is None:
            return
        with contextlib.suppress(ChannelError):
            ns = await on_thread(channel_of)(term.session.run.sandbox)
            await ask(ns, {"op": "pty_close", "id": public_id})

    # -- transcripts -----------------------------------------------------------------

    async def record_all(self) -> None:
        for term in await db(_open_here)():
            if term.public_id not in self.recorders:
                recorder = Attachment(term.public_id, session_pk=term.session_id)
                self.recorders[term.public_id] = recorder
                recorder.task = asyncio.create_task(self._record(term, recorder))

    async def _record(self, term: Terminal, recorder: Attachment) -> None:
        upload: Upload | None = None
        try:
            upload = Upload(term.public_id)
            raw_after = await upload.start()
            recorder.names, recorder.masker = await db(_masker_of)(term.session)
            reader = await self._attach(term, recorder, raw_after, {})
            if reader is None:
                return
            while True:
                try:
                    line = await asyncio.wait_for(reader.readline(), upload.wait_s())
                except TimeoutError:
                    await upload.flush()
                    continue
                if not line:
                    break
                message = json.loads(line)
                if "o" in message:
                    raw = base64.b64decode(message["o"])
                    shown = recorder.masker.feed(raw)
                    upload.add(shown, int(message["at"]) + len(raw) - recorder.masker.held)
                    if upload.due:
                        await upload.flush()
                elif "x" in message:
                    try:
                        await upload.last()
                    finally:
                        await _exited(term, message)  # ended, whatever was sent
                    return
            await upload.flush()
        except (ChannelError, OSError, ValueError, Gone, WebRefused, WebUnavailable) as e:
            log.info("terminal %s: recording stopped (%s); again at the next tick", term, e)
        finally:
            if recorder.writer is not None:
                recorder.writer.close()
            self.recorders.pop(term.public_id, None)


async def _exited(term: Terminal, message: dict[str, Any]) -> None:
    """Its shell ended: by itself (exited), or hung up by a close or its session's stop."""
    why = str(message.get("why") or "")
    if why in ("closed", "session_stopped"):
        await db(term.end)(TerminalState.CLOSED, why, message.get("x"))
    else:
        await db(term.end)(TerminalState.EXITED, "exited", message.get("x"))
    await db(term.refresh_from_db)()


def _facts(first: dict[str, Any]) -> dict[str, Any]:
    return {key: first.get(key) for key in ("start", "end", "exit")}


def _ended(term: Terminal | None) -> dict[str, Any]:
    if term is None:
        return {"type": "terminal.ended", "state": "closed", "reason": "not_found"}
    session = term.session
    reason = term.reason or (
        "session_stopped" if session.state != SessionState.STARTING else "session_not_ready"
    )
    return {
        "type": "terminal.ended",
        "state": term.state if not term.is_open else TerminalState.CLOSED,
        "reason": reason,
        "exit_code": term.exit_code,
        "session_state": session.state,
    }
