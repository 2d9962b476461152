"""One delivery of a run's prepare task at a time (runs.tasks.prepare_run).

Deliveries can overlap: the agent's safety net sends a run again once it sat
RUN_STALE_QUEUED_S since its last send or start, and a loaded worker may still be
preparing it then; a message left from before is another. Two at once made the run's
volume or container twice, clashed on the name and ended the run engine_unavailable.
A delivery that takes the run holds a lease on its row, renewed while it prepares; any
other delivery meanwhile leaves the run alone, and the safety net sends nothing while
the lease is live. A worker that dies stops renewing: the lease lapses within one bound
and the next resend takes the run over, as soon as before.
"""

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from django.conf import settings
from django.db import DatabaseError, connection
from django.utils import timezone

from runs.models import Run

log = logging.getLogger(__name__)

LEASE = timedelta(seconds=settings.RUN_STALE_QUEUED_S)


@contextmanager
def renewed(run: Run) -> Iterator[None]:
    """While the body runs, the lease this delivery took (Run.lease_prepare) is renewed
    every third of it; let go at the end."""
    stop = threading.Event()

    def renew() -> None:
        try:
            while not stop.wait(LEASE.total_seconds() / 3):
                try:
                    Run.objects.filter(pk=run.pk).update(prepare_lease_until=timezone.now() + LEASE)
                except DatabaseError:
                    log.warning("run %s: its prepare lease was not renewed", run.public_id)
        finally:
            connection.close()  # this thread's own

    thread = threading.Thread(target=renew, name=f"lease-{run.public_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        Run.objects.filter(pk=run.pk).update(prepare_lease_until=None)
