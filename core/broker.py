"""Handing a task to the broker without letting an unreachable broker fail the caller.

Every task Berth sends follows a row that is already committed (tasks are sent on
commit), and every such row has a safety net that sends its task again later (the
runner agent's reconcile). So when Redis is down, the right answer to the person who
asked is the row they asked for, not a 500: `send` says False, logs once per outage,
and the safety net delivers the task once the broker is back.
"""

import logging
import threading
import time
from typing import Any

import kombu.exceptions
import redis.exceptions

log = logging.getLogger(__name__)

# Short: a request must not hang on a broker that refuses connections. Celery's default
# tries 4 times over about a second; one retry catches a connection Redis just dropped.
RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2}
UNREACHABLE = (kombu.exceptions.OperationalError, redis.exceptions.RedisError, OSError)

# Within this long of a failed send, the next one fails at once: an admission round
# that sends several tasks, or a burst of requests, waits for one failure, not one each.
FAIL_FAST_S = 1.0

_down = threading.Event()  # set while the last send failed: one warning per outage
_failed_at = 0.0


def send(task: Any, args: tuple[Any, ...], **options: Any) -> bool:
    """`task.apply_async(args, **options)`; False when the broker cannot be reached."""
    global _failed_at
    if _down.is_set() and time.monotonic() - _failed_at < FAIL_FAST_S:
        return False
    try:
        task.apply_async(args, retry_policy=RETRY_POLICY, **options)
    except UNREACHABLE as e:
        _failed_at = time.monotonic()
        if not _down.is_set():
            _down.set()
            log.warning(
                "broker unreachable, %s will be sent again once it is back: %s", task.name, e
            )
        return False
    if _down.is_set():
        _down.clear()
        log.info("broker reachable again")
    return True
