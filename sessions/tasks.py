"""The web host's periodic work on sessions (beat, on the web queue)."""

import logging

from celery import shared_task

from sessions import transcripts

log = logging.getLogger(__name__)


@shared_task(name="sessions.tasks.sweep_transcripts", ignore_result=True)
def sweep_transcripts() -> None:
    """Transcripts of deleted sessions, which their host's agent could not remove (they
    are the web host's): gone within the hour after the session."""
    if removed := transcripts.sweep():
        log.info("sessions: the transcripts of %d deleted session(s) removed", removed)
