"""A log on its way to the web host, which alone keeps it (logs.logstore, docs/hosts.md
"The internal API"): what a runner host's agent and worker write into a run's or an
exec's log.

`ShippedLog` formats entries exactly as the store's own writer does (the same cut of
long lines, the same cap and its one marker: it is a LogWriter that keeps no file) and
`flush` sends what waits, in batches under the web host's request cap, each saying the
count it goes after. Its state at the start is the web host's (`/cursor`), so a follower
that restarts resumes from what is stored: nothing twice, nothing missed.

While the web host does not answer, `flush` waits for it (up to SHIP_PATIENCE_S): the
engine keeps the container's output meanwhile, so holding the follower back loses
nothing, where dropping the batch would. Past it the follower fails, and its run is not
ended on a partial log: the reconcile follows it again (runs.engine_owner).
"""

import functools
import logging
import time
from collections.abc import Callable
from typing import Any

from logs.logstore import Entry, LogWriter
from sandbox import webapi

log = logging.getLogger("berth.runner_agent")

# A batch's text, at most (JSON escaping can make it 6 times longer on the wire: it
# stays well under MAX_REQUEST_BODY, which daphne reads whole).
BATCH_BYTES = 1 << 20
SHIP_PATIENCE_S = 60.0
RETRY_S = 0.5


def run_log(run_public_id: str) -> str:
    return f"/runs/{run_public_id}/log"


def exec_log(exec_public_id: str) -> str:
    return f"/execs/{exec_public_id}/log"


class ShippedLog(LogWriter):
    """A writer of the log at `path` (`run_log`, `exec_log`) on the web host.

    `resume=False`: its place is not asked for; entries go at the end of the log,
    wherever that is (a note, written when no follower is writing)."""

    def __init__(self, path: str, resume: bool = True) -> None:
        self._start()
        self.path = path
        self.web = webapi.client()
        self.resumed = resume
        if resume:
            at = patiently(lambda: self.web.get(f"{path}/cursor"))
            self.count, self.last_ts = int(at["count"]), at["last_ts"]
            self.total_bytes, self.truncated = int(at["total_bytes"]), bool(at["truncated"])
        self.sent = self.count  # the count the web host answered last

    def _write(self, stream: str, text: str, ts: str | None) -> None:
        self._pending.append((stream, text, ts))
        self.count += 1
        if ts is not None:
            self.last_ts = ts
        if not self.batching:
            self.flush()

    def flush(self) -> None:
        while self._pending:
            size, n = 0, 0
            for _, text, _ in self._pending:
                size += len(text) + 32
                n += 1
                if size >= BATCH_BYTES:
                    break
            self._send(self._pending[:n])
            del self._pending[:n]
        self.count = self.sent

    def _send(self, batch: list[Entry]) -> None:
        after: int | None = self.sent if self.resumed else None
        while True:
            try:
                at = patiently(
                    functools.partial(self.web.post, self.path, {"after": after, "entries": batch})
                )
                break
            except webapi.WebRefused as e:
                moved = e.details.get("count") if e.code == "log_moved" else None
                if not isinstance(moved, int) or after is None:
                    raise
                # Another writer's note went in first: these go after it.
                log.warning("log %s: %s; sending after entry %d", self.path, e.message, moved)
                after = moved
        self.sent = int(at["count"])

    def close(self) -> None:
        if not self.closed:
            self.flush()  # closed only once sent: a later close tries again
            self.closed = True


def patiently(call: Callable[[], Any]) -> Any:
    """`call` tried again while the web host does not answer (a restart), for up to
    SHIP_PATIENCE_S. A request whose answer was lost may so be sent twice: each door
    this is used for keeps a repeat once (a batch, a piece of an upload)."""
    deadline = time.monotonic() + SHIP_PATIENCE_S
    while True:
        try:
            return call()
        except webapi.WebUnavailable:
            if time.monotonic() >= deadline:
                raise
            time.sleep(RETRY_S)  # waited for, not dropped


def note(path: str, text: str) -> int:
    """One system line from Berth at the end of the log ("[setup] done…"), written when
    no follower of it is writing. The log's new count (the web host signals readers)."""
    writer = ShippedLog(path, resume=False)
    writer.append_system(text)
    writer.close()
    return writer.sent


def count(path: str) -> int:
    """How many entries the web host holds of the log."""
    return int(webapi.client().get(path)["count"])


def tail(path: str, n: int) -> list[dict[str, Any]]:
    """Its last `n` entries (at most), oldest first."""
    entries: list[dict[str, Any]] = webapi.client().get(f"{path}?tail={n}")["entries"]
    return entries
