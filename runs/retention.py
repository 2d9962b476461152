"""Retention of run outputs: logs (files under DATA_DIR) and artifacts (runs.artifacts),
kept for RUN_RETENTION_DAYS after the run ends, then removed; the run row stays and
says so."""

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from logs import logstore
from runs import artifacts, outputs_up
from runs.models import TERMINAL_STATES, Run


def apply(days: int | None = None) -> list[str]:
    """Remove outputs of runs that ended before the cut-off; the ids of those done."""
    keep = settings.RUN_RETENTION_DAYS if days is None else days
    cutoff = timezone.now() - timedelta(days=keep)
    done = []
    for run in Run.objects.filter(
        state__in=TERMINAL_STATES, finished_at__lt=cutoff, outputs_expired_at__isnull=True
    ).only("id", "public_id"):
        for path in logstore.paths(run.public_id):
            path.unlink(missing_ok=True)
        artifacts.remove_all(run.public_id)
        run.expire_outputs()
        done.append(run.public_id)
    outputs_up.sweep()
    return done
