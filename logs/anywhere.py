"""A run's log from code that runs in any process: a run's end is written by whichever
process saw it (the runner agent, a worker, daphne for a cancel), and what follows the
end (a preview's note and last lines) runs there too. The web host's processes hold the
store (logs.logstore); a runner host's reach it through the internal API
(logs.shipped), as its agent's followers always do."""

import logging
from typing import Any

from django.conf import settings

from logs import logstore, shipped
from sandbox import webapi

log = logging.getLogger("berth.runs")


def holds_store() -> bool:
    return bool(settings.BERTH_ROLE != "runner")


def note(run_public_id: str, text: str) -> None:
    """A note at the end of the log; on a runner host whose web host does not answer it
    is said in the process's log instead (what follows a run's end goes on)."""
    if holds_store():
        logstore.note(run_public_id, text)
        return
    try:
        shipped.note(shipped.run_log(run_public_id), text)
    except (webapi.WebUnavailable, webapi.WebRefused) as e:
        log.warning("run %s: a note was not stored (%s): %s", run_public_id, e, text)


def tail(run_public_id: str, n: int) -> list[dict[str, Any]]:
    """The log's last `n` entries, oldest first (none where the web host does not
    answer a runner host)."""
    if holds_store():
        total = logstore.count(run_public_id)
        return logstore.read(run_public_id, max(0, total - n), n)
    try:
        return shipped.tail(shipped.run_log(run_public_id), n)
    except (webapi.WebUnavailable, webapi.WebRefused) as e:
        log.warning("run %s: its last lines were not read: %s", run_public_id, e)
        return []
