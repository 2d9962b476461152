"""Retention of run outputs: logs and artifacts are files under DATA_DIR, kept for
RUN_RETENTION_DAYS after the run ends, then removed; the run row stays and says so."""

import shutil
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from logs import logstore
from runs.models import TERMINAL_STATES, Run
from runs.outputs import artifacts_dir


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
        shutil.rmtree(artifacts_dir(run.public_id), ignore_errors=True)
        run.expire_outputs()
        done.append(run.public_id)
    return done
