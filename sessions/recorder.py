"""A terminal's transcript on its way to the web host (sessions.transcripts keeps it):
the recorder's masked output gathered and sent in chunks through the internal API,
each saying where it goes, so one sent twice is refused rather than kept twice."""

import asyncio
import base64
import time

from sandbox import webapi
from sandbox.loop import on_thread

CHUNK_BYTES = 64 << 10  # sent once this much is gathered
FLUSH_S = 0.25  # or once the oldest byte gathered waited this long
# Gathered while the web host does not answer; past it the recorder stops and starts
# again from where the web host's transcript is (the shell's replay has the rest).
MAX_PENDING = 1 << 20
LAST_TRIES_S = 10.0  # what the shell printed last, tried this long
LAST_RETRY_S = 0.5


class Gone(Exception):
    """The transcript cannot go on from here: the web host refused a chunk, or did not
    answer while too much waited."""


class Upload:
    def __init__(self, terminal: str) -> None:
        self.web = webapi.WebAPI()
        self.path = f"/terminals/{terminal}/transcript"
        self.pending = bytearray()
        self.since = 0.0
        self.raw_at = 0
        self.size = 0

    async def start(self) -> int:
        """Where the web host's transcript is: the output offset to attach after."""
        at = await on_thread(self.web.get)(self.path)
        self.raw_at, self.size = int(at["raw"]), int(at["size"])
        return self.raw_at

    def add(self, shown: bytes, raw_at: int) -> None:
        if not self.pending:
            self.since = time.monotonic()
        self.pending += shown
        self.raw_at = raw_at

    @property
    def due(self) -> bool:
        return len(self.pending) >= CHUNK_BYTES or (
            bool(self.pending) and time.monotonic() - self.since >= FLUSH_S
        )

    def wait_s(self) -> float | None:
        """How long the next read may wait before what is gathered is due."""
        if not self.pending:
            return None
        return max(0.0, FLUSH_S - (time.monotonic() - self.since))

    async def last(self) -> None:
        """What is gathered when the shell ended: no recorder follows to send it later,
        so it is tried again for a little while (a web host restarting), then given up
        with a line in the log."""
        deadline = time.monotonic() + LAST_TRIES_S
        while self.pending:
            await self.flush()
            if self.pending and time.monotonic() >= deadline:
                raise Gone(f"its last {len(self.pending)} bytes could not be sent")
            if self.pending:
                await asyncio.sleep(LAST_RETRY_S)

    async def flush(self) -> None:
        if not self.pending:
            return  # output the masker holds back is sent with what follows it
        body = {
            "size": self.size,
            "raw": self.raw_at,
            "data": base64.b64encode(self.pending).decode(),
        }
        try:
            at = await on_thread(self.web.post)(self.path, body)
        except webapi.WebUnavailable as e:
            if len(self.pending) > MAX_PENDING:
                raise Gone(str(e)) from None
            self.since = time.monotonic()  # tried again at the next due
            return
        except webapi.WebRefused as e:
            raise Gone(str(e)) from None
        self.size = int(at["size"])
        self.pending.clear()
