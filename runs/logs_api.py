"""JSON API door onto a run's log: the same entries the WebSocket streams, by page."""

from typing import Annotated

from django.http import HttpRequest
from ninja import Field, Router

from core.schemas import answers
from logs import logstore
from runs.access import access_run
from runs.models import Run
from runs.schemas import LogEntry, LogPage
from workspaces.api import actor_of

router = Router(tags=["runs"])

MAX_LIMIT = 5000
Cursor = Annotated[int, Field(ge=0)]


@router.get(
    "/runs/{run_id}/logs",
    response=answers(LogPage, 403, 404, 422),
    summary="A run's log entries after a sequence number",
)
def run_logs(request: HttpRequest, run_id: str, after: Cursor = 0, limit: int = 1000) -> LogPage:
    """Entries with seq > `after`; `next` is the cursor for the following page, and
    `complete` says the run has ended and nothing remains after `next`."""
    return log_page(access_run(actor_of(request), run_id, "run"), after, limit)


def log_page(run: Run, after: int, limit: int) -> LogPage:
    # The state before the entries: the agent writes every entry before the run's end,
    # so a run seen terminal here has nothing after what the read below sees.
    return page_of(run.public_id, not run.is_active, after, limit)


def page_of(public_id: str, ended: bool, after: int, limit: int) -> LogPage:
    """A page of any log in the store (a run's, an exec's); `ended` read before it."""
    after = max(0, after)
    entries = [
        LogEntry.model_validate(e)
        for e in logstore.read(public_id, after, max(1, min(limit, MAX_LIMIT)))
    ]
    cursor = entries[-1].seq if entries else after
    return LogPage(
        entries=entries, next=cursor, complete=ended and cursor >= logstore.count(public_id)
    )
