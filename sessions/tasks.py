"""The web host's periodic work on sessions (beat, on the web queue)."""

import logging

from celery import shared_task

from sessions import snapshot, snapstore, transcripts

log = logging.getLogger(__name__)


@shared_task(name="sessions.tasks.sweep_transcripts", ignore_result=True)
def sweep_transcripts() -> None:
    """Transcripts of deleted sessions, which their host's agent could not remove (they
    are the web host's): gone within the hour after the session."""
    if removed := transcripts.sweep():
        log.info("sessions: the transcripts of %d deleted session(s) removed", removed)


@shared_task(name="sessions.tasks.sweep_reads", ignore_result=True)
def sweep_reads() -> int:
    """The reads' scratch stores no door may still open (sessions.snapstore): those a
    newer read replaced while a door held them, those past SESSION_READ_KEEP_S, deleted
    sessions' and a read's a crash cut short (one in use is left to a later sweep)."""
    removed = snapstore.sweep(snapshot.reads_kept())
    if removed:
        log.info("sessions: %d read stores no door needs removed", removed)
    return removed
