"""A run's log from code that runs in any process: a run's end is written by whichever
process saw it (the runner agent, a worker, daphne for a cancel), and what follows the
end (a preview's note and last lines) runs there too. The web host's processes hold the
store (logs.logstore); a runner host's reach it through the internal API
(logs.shipped), as its agent's followers always do."""

from typing import Any

from django.conf import settings

from logs import logstore, shipped


def holds_store() -> bool:
    return bool(settings.BERTH_ROLE != "runner")


def note(run_public_id: str, text: str) -> int:
    if holds_store():
        return logstore.note(run_public_id, text)
    return shipped.note(shipped.run_log(run_public_id), text)


def count(run_public_id: str) -> int:
    if holds_store():
        return logstore.count(run_public_id)
    return shipped.count(shipped.run_log(run_public_id))


def tail(run_public_id: str, n: int) -> list[dict[str, Any]]:
    """The log's last `n` entries, oldest first."""
    if holds_store():
        total = logstore.count(run_public_id)
        return logstore.read(run_public_id, max(0, total - n), n)
    return shipped.tail(shipped.run_log(run_public_id), n)
