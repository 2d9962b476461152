"""Celery's part of a run is short: create and start the sandbox, then return.

The runner agent carries the run to its end, so a killed worker loses nothing and a
redelivered task is harmless (the container name is unique per run).
"""

import logging

import docker
import requests
from celery import shared_task
from django.utils import timezone

from runner import sandbox, secrets
from runner.models import Run, RunState
from runner.outcomes import describe

log = logging.getLogger(__name__)


@shared_task(acks_late=True, ignore_result=True)
def prepare_run(run_id: int) -> None:
    run = Run.objects.select_related("workspace__team").filter(pk=run_id).first()
    if run is None or run.state not in (RunState.QUEUED, RunState.PREPARING) or \
            run.admitted_at is None:
        return  # gone, cancelled, carried further by an earlier delivery, or not admitted
    first = run.state == RunState.QUEUED
    if first and not run.advance(RunState.PREPARING, (RunState.QUEUED,),
                                 started_at=timezone.now()):
        return  # another delivery, a cancel or a reconcile got there first
    try:
        # Secret values come from the database and env values from the run, both
        # encrypted there; the env values are cleared when the run ends.
        granted = secrets.values_for(run.workspace_id, run.secret_names)
        if granted:
            Run.objects.filter(pk=run.pk).update(secrets_sealed=secrets.seal(granted))
        env = {**(secrets.unseal(run.env_sealed) if run.env_sealed else {}), **granted}
        sandbox.prepare_and_start(run, env,
                                  still_wanted=lambda: Run.objects.filter(
                                      pk=run.pk, state=RunState.PREPARING).exists(),
                                  first_delivery=first)
    except sandbox.SandboxError as e:
        _fail(run, e.reason, **e.facts)
        return
    except (docker.errors.DockerException, requests.exceptions.ConnectionError) as e:
        log.warning("run %s: engine unavailable: %s", run.public_id, e)
        _fail(run, "engine_unavailable")
        return
    # In the setup phase the command itself has not started: the agent stamps
    # process_started_at when it starts the main container.
    phase = Run.objects.filter(pk=run.pk).values_list("phase", flat=True).first()
    started = run.advance(RunState.RUNNING, (RunState.PREPARING,),
                          **({"process_started_at": timezone.now()} if phase == "main" else {}))
    if not started:
        # It ended while we prepared: cancelled, or the command already exited and the
        # agent wrote the end. Only a cancel needs the process stopped; the agent
        # removes the container once it has its log.
        run.refresh_from_db()
        if run.reason == "cancelled_by_user":
            sandbox.signal_sandbox(run.setup_container_name, "SIGKILL")
            sandbox.signal_sandbox(run.container_name, "SIGKILL")


def _fail(run: Run, reason: str, **facts: object) -> None:
    state, message = describe(reason, **facts)
    run.finish(state, reason, message)
    sandbox.remove_run(run)


@shared_task(ignore_result=True)
def apply_retention() -> None:
    """Logs and artifacts of runs that ended more than RUN_RETENTION_DAYS ago are removed
    (the run row, with its inputs, outcome and changes, stays)."""
    from runner import retention

    retention.apply()


@shared_task(ignore_result=True)
def evict_caches() -> None:
    from runner import caches

    caches.evict()
