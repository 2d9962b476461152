"""Celery's part of a run is short: create and start the sandbox, then return.

The runner agent carries the run to its end, so a killed worker loses nothing and a
redelivered task is harmless: one delivery at a time holds the run (runs.lease), and a
later one finds the sandboxes the first made.
"""

import logging
from datetime import timedelta

import docker
import requests
from celery import shared_task
from django.conf import settings
from django.utils import timezone

from core import broker
from runs import caches, lease, prepare, quotas, retention, secrets
from runs.models import Run, RunState
from runs.outcomes import describe
from sandbox import backend
from sandbox.hosts import Host, HostState
from sandbox.models import this_host

log = logging.getLogger(__name__)

# An admitted run whose prepare task has not reached the broker this long after its
# admission is sent again. Longer than a send on commit takes, so the agent does not
# race the request that is sending it (a second delivery would be harmless, only waste).
UNDELIVERED_AFTER = timedelta(seconds=5)


# Named as before the package was renamed from runner/: a message queued by the previous
# version still finds its task after an upgrade.
@shared_task(name="runner.tasks.prepare_run", acks_late=True, ignore_result=True)
def prepare_run(run_id: int) -> None:
    run = Run.objects.select_related("workspace__team").filter(pk=run_id).first()
    if (
        run is None
        or run.state not in (RunState.QUEUED, RunState.PREPARING)
        or run.admitted_at is None
    ):
        return  # gone, cancelled, carried further by an earlier delivery, or not admitted
    if run.runner_host != this_host():
        # Placed on another host (a worker started on the wrong queue, or a message
        # from before placement): built here, its own host's agent would find no
        # container of it and end it lost. Its own host's queue gets it.
        log.warning("run %s is placed on %r: sent there", run.public_id, run.runner_host)
        send_prepare(run.pk)
        return
    if not run.lease_prepare(lease.LEASE):
        # Another delivery is preparing it right now (runs.lease): it carries the run.
        log.info("run %s is being prepared by another delivery", run.public_id)
        return
    with lease.renewed(run):
        _prepare(run)


def _prepare(run: Run) -> None:
    # Read again under the lease: a delivery that held it until now may have carried
    # the run on.
    run.refresh_from_db(fields=["state"])
    if run.state not in (RunState.QUEUED, RunState.PREPARING):
        return
    first = run.state == RunState.QUEUED
    if first and not run.advance(RunState.PREPARING, (RunState.QUEUED,), started_at=timezone.now()):
        return  # another delivery, a cancel or a reconcile got there first
    try:
        # Its env and granted secrets' values, sealed for this host when it was placed
        # (runs.secrets.placed); the env values are cleared when the run ends.
        env = {**secrets.open_sealed(run.env_sealed), **secrets.open_sealed(run.secrets_sealed)}
        prepare.prepare_and_start(
            run,
            env,
            still_wanted=lambda: Run.objects.filter(pk=run.pk, state=RunState.PREPARING).exists(),
            first_delivery=first,
        )
    except backend.SandboxError as e:
        _fail(run, e.reason, **e.facts)
        return
    except (docker.errors.DockerException, requests.exceptions.ConnectionError) as e:
        log.warning("run %s: engine unavailable: %s", run.public_id, e)
        _fail(run, "engine_unavailable")
        return
    except Exception as e:
        # A fault of Berth's own: the run ends typed, with what went wrong, rather
        # than sent again for ever by the agent's safety net, each try failing alike.
        log.exception("run %s: its preparation failed", run.public_id)
        _fail(run, "sandbox_failed", detail=f"{type(e).__name__}: {str(e)[:300]}")
        return
    # In the setup phase the command itself has not started: the agent stamps
    # process_started_at when it starts the main container.
    phase = Run.objects.filter(pk=run.pk).values_list("phase", flat=True).first()
    started = run.advance(
        RunState.RUNNING,
        (RunState.PREPARING,),
        **({"process_started_at": timezone.now()} if phase == "main" else {}),
    )
    if not started:
        # It ended while we prepared: cancelled, or the command already exited and the
        # agent wrote the end. Only a cancel needs the process stopped; the agent
        # removes the container once it has its log.
        run.refresh_from_db()
        if run.reason == "cancelled_by_user":
            for sandbox in prepare.sandboxes_of(run):
                backend.signal_sandbox(sandbox.name, "SIGKILL")


@shared_task(name="runs.tasks.admit_runs", ignore_result=True)
def admit_runs() -> None:
    """Admission asked for by a runner host (a run ended there): done where the web
    host's key seals the admitted runs' values for their hosts (runs.quotas.admit)."""
    quotas.admit()


def runner_queue(host: str) -> str:
    """The queue `host`'s worker takes sandbox work from."""
    return f"{settings.RUNNER_QUEUE_PREFIX}.{host}"


def send_prepare(run_id: int) -> bool:
    """Hand an admitted run's prepare task to the broker, on commit of its admission.

    Why the run is accepted (201/202, `queued`) even when Redis is down, rather than
    refused with a 503: the row is committed before any task can be sent (tasks are sent
    on commit, so a worker never reads a row that is not there), so refusing would mean
    deleting what was written, and a broker that fails between a check and the send
    would still leave a row behind. Instead the row says whether its task got through
    (`prepare_sent_at`), and the runner agent sends the ones that did not once the
    broker answers again (`undelivered_runs`, `send_again`). The task is idempotent,
    so a send that got through but was not recorded costs one extra delivery at most."""
    host = Run.objects.filter(pk=run_id).values_list("runner_host", flat=True).first()
    if not host:
        # Admitted runs are always placed (runs.quotas, runs.actions): this is a bug.
        log.error("run %s has no host: its prepare task is not sent", run_id)
        return False
    if not broker.send(prepare_run, (run_id,), queue=runner_queue(host)):
        return False
    Run.mark_prepare_sent(run_id)
    return True


def undelivered_runs() -> list[int]:
    """Admitted runs of this host still queued whose prepare task never reached the
    broker (each host's agent sends its own)."""
    return list(
        Run.objects.filter(
            runner_host=this_host(),
            state=RunState.QUEUED,
            admitted_at__lt=timezone.now() - UNDELIVERED_AFTER,
            prepare_sent_at=None,
        )
        .order_by("admitted_at")
        .values_list("pk", flat=True)
    )


def send_again(run_ids: list[int], why: str) -> int:
    """Send each run's prepare task again; stops at the first failure (the broker is
    still down: the next round tries again). Returns how many were sent."""
    sent = 0
    for run_id in run_ids:
        if not send_prepare(run_id):
            break
        sent += 1
    if sent:
        log.info("sent the prepare task of %d run(s) again: %s", sent, why)
    return sent


def _fail(run: Run, reason: str, **facts: object) -> None:
    state, message = describe(reason, **facts)
    run.finish(state, reason, message)
    prepare.remove_run(run)


@shared_task(name="runner.tasks.apply_retention", ignore_result=True)
def apply_retention() -> None:
    """Logs and artifacts of runs that ended more than RUN_RETENTION_DAYS ago are removed
    (the run row, with its inputs, outcome and changes, stays)."""
    retention.apply()


@shared_task(name="runner.tasks.evict_caches", ignore_result=True)
def evict_caches() -> None:
    """Beat's, on the web queue: each host that is not lost and beats evicts its own
    caches, on its own queue (its volumes are on its engine). A host whose agent is
    silent gets nothing: no message piles up on a queue no worker takes."""
    for host in Host.objects.exclude(state=HostState.LOST):
        if host.fresh():
            broker.send(evict_host_caches, (), queue=runner_queue(host.name))


@shared_task(name="runner.tasks.evict_host_caches", ignore_result=True)
def evict_host_caches() -> None:
    caches.evict()
