"""The web host's side of shipped logs (logs.shipped): what the internal API's log doors
(runs.host_api, sessions.host_api) do once they know the log is the asking host's.

A batch is checked whole before anything is written (a stream Berth knows, text of at
most a line's cap, a timestamp or null), so a bad one leaves the log as it was; a log
past logstore.most_bytes takes nothing more, whatever a runner host sends."""

import json
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest
from ninja import Router

from core.errors import BerthError, Conflict, Invalid
from logs import logstore

MAX_TAIL = 1000


def accept(log_id: str, request: HttpRequest) -> dict[str, int]:
    """POST {after, entries: [[stream, text, ts]…]}: the log's new count; 409
    `log_moved` (with the count) when `after` is not the log's end."""
    try:
        body = json.loads(request.body)
    except ValueError:
        raise Invalid("The body is not JSON.") from None
    after = body.get("after") if isinstance(body, dict) else None
    entries = body.get("entries") if isinstance(body, dict) else None
    if (after is not None and (not isinstance(after, int) or after < 0)) or not isinstance(
        entries, list
    ):
        raise Invalid("Send {after: a count or null, entries: [[stream, text, ts], …]}.")
    checked = [_entry(e, n) for n, e in enumerate(entries)]
    try:
        count = logstore.store(log_id, after, checked)
    except UnicodeEncodeError:
        raise Invalid("An entry's text is not Unicode (a lone surrogate): nothing kept.") from None
    except logstore.Full as e:
        raise BerthError(f"{e}: nothing more is kept.", code="log_full", status=413) from None
    except logstore.Moved as moved:
        raise Conflict(
            f"{moved}: send after that.", {"count": moved.count}, code="log_moved"
        ) from None
    if after is None and checked:
        logstore.signal(log_id, count)  # a note: no follower of the log signals it
    return {"count": count}


def _entry(entry: Any, n: int) -> logstore.Entry:
    if (
        isinstance(entry, list)
        and len(entry) == 3
        and entry[0] in logstore.STREAMS
        and isinstance(entry[1], str)
        and len(entry[1]) <= settings.RUN_LOG_MAX_LINE
        and (entry[2] is None or (isinstance(entry[2], str) and len(entry[2]) <= 64))
    ):
        return entry[0], entry[1], entry[2]
    raise Invalid(
        f"Entry {n} is not [stream, text of at most {settings.RUN_LOG_MAX_LINE} characters, "
        "timestamp or null].",
        {"entry": n},
    )


def answer(log_id: str, tail: int = 0) -> dict[str, Any]:
    """GET: the log's count, and with `tail` its last entries (at most MAX_TAIL)."""
    count = logstore.count(log_id)
    out: dict[str, Any] = {"count": count}
    if tail > 0:
        tail = min(tail, MAX_TAIL)
        out["entries"] = logstore.read(log_id, max(0, count - tail), tail)
    return out


def add_doors(router: Router, kind: str, owned: Callable[[HttpRequest, str], str]) -> None:
    """The internal API's three doors onto one kind of log (`runs`, `execs`) on
    `router`: `owned(request, id)` answers the log's id when it is the asking host's,
    else raises NotFound."""

    @router.get(f"/{kind}/{{log_id}}/log", response=dict[str, Any], operation_id=f"{kind}_log")
    def count_or_tail(request: HttpRequest, log_id: str, tail: int = 0) -> dict[str, Any]:
        """How many entries the log holds; with `tail`, its last entries."""
        return answer(owned(request, log_id), tail)

    @router.get(
        f"/{kind}/{{log_id}}/log/cursor", response=dict[str, Any], operation_id=f"{kind}_cursor"
    )
    def cursor(request: HttpRequest, log_id: str) -> dict[str, Any]:
        """Where the log's follower resumes (logs.logstore.cursor)."""
        return logstore.cursor(owned(request, log_id))

    @router.post(f"/{kind}/{{log_id}}/log", response=dict[str, int], operation_id=f"{kind}_append")
    def append(request: HttpRequest, log_id: str) -> dict[str, int]:
        """A batch of entries the log's host formatted (logs.shipped), kept at its end."""
        return accept(owned(request, log_id), request)
