"""The runner agent reconciles: it removes this instance's orphans and nothing else; and
one run's fault never stops it looking after the others."""

import asyncio
import contextlib
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import docker
import pytest
from django.conf import settings
from django.core.management import call_command
from django.utils import timezone

from accounts.access import Actor
from agent.loop import Agent
from core.ids import new_id
from runs.models import Run, RunState
from sandbox.containers import remove_sandbox
from sandbox.engine import engine, instance_label, resource_name
from sandbox.models import Sandbox, SandboxKind, SandboxState
from workspaces import actions as workspace_actions

pytestmark = pytest.mark.docker


def test_it_removes_this_instances_orphans_but_not_another_instances(transactional_db):
    mine = engine().containers.create(
        settings.SANDBOX_IMAGE,
        ["true"],
        name=resource_name("run", new_id()),
        labels={**instance_label(), "berth.kind": "run", "berth.owner": new_id()},
        network_mode="none",
    )
    other_instance = "other" + new_id(3)
    theirs = engine().containers.create(
        settings.SANDBOX_IMAGE,
        ["true"],
        name=f"berth-{other_instance}-run-{new_id()}",
        labels={"berth.instance": other_instance, "berth.kind": "run", "berth.owner": new_id()},
        network_mode="none",
    )
    try:
        call_command("runner_agent", once=True)
        names = {c["Names"][0].lstrip("/") for c in engine().api.containers(all=True)}
        assert mine.name not in names
        assert theirs.name in names
    finally:
        theirs.remove(force=True)
        if mine.name in {c["Names"][0].lstrip("/") for c in engine().api.containers(all=True)}:
            mine.remove(force=True)


def test_two_removals_of_one_sandbox_at_once_both_end_with_it_gone():
    """Two removers at once (two agents' sweeps, a sweep and a cancel): the engine
    answers the second 409 "removal already in progress"; it waits for the first, so
    neither fails and the volume the container held goes too."""
    names = [resource_name("run", new_id()) for _ in range(4)]
    for name in names:
        engine().volumes.create(name, labels=instance_label())
        engine().containers.run(
            settings.SANDBOX_IMAGE,
            ["sleep", "300"],
            name=name,
            labels={**instance_label(), "berth.kind": "run", "berth.owner": new_id()},
            network_mode="none",
            volumes={name: {"bind": "/workspace", "mode": "rw"}},
            detach=True,
        )
    try:
        for name in names:
            with ThreadPoolExecutor(2) as pool:
                for removal in [pool.submit(remove_sandbox, name) for _ in range(2)]:
                    removal.result()
            assert not engine().api.containers(all=True, filters={"name": name})
            assert name not in {v.name for v in engine().volumes.list()}
    finally:
        for name in names:
            remove_sandbox(name)


def test_one_sandboxs_fault_never_keeps_another_sandboxs_deadline_from_applying(
    transactional_db, cast
):
    long_ago = timezone.now() - timedelta(hours=1)

    def running(limits: dict, deadline=long_ago) -> Sandbox:
        public_id = new_id()
        return Sandbox.objects.create(
            public_id=public_id,
            name=Sandbox.engine_name(public_id),
            kind=SandboxKind.RUN,
            owner_kind="run",
            owner_id=new_id(),
            image=settings.SANDBOX_IMAGE,
            runtime="runc",
            limits=limits,
            state=SandboxState.RUNNING,
            deadline=deadline,
        )

    # Rows no door makes, that a bug might: limits that are not numbers, none at all.
    # The overdue sandbox sits between two broken ones, whatever the order.
    broken = [running({"timeout_s": "soon"}, deadline=None)]
    overdue = running({"cpus": 1.0, "timeout_s": 60, "disk_mb": 2048})
    broken.append(running({"timeout_s": "soon"}, deadline=None))
    not_yet = running({"timeout_s": 3600}, deadline=timezone.now() + timedelta(hours=1))
    asyncio.run(Agent().tick())
    overdue.refresh_from_db()
    assert overdue.stop_reason == "timeout"  # asked to stop, though the others failed
    assert overdue.stop_signalled_at is not None
    for sandbox in [*broken, not_yet]:
        sandbox.refresh_from_db()
        assert sandbox.stop_reason == ""


def test_a_run_whose_container_was_made_but_never_started_is_sent_again(transactional_db, cast):
    """The worker died between making the sandbox and starting it: the container is
    there, `created`, and carries nothing. Once stale, the run's task is sent again (the
    new delivery replaces the unstarted container) instead of waiting for ever."""
    workspace = workspace_actions.create_workspace(cast.team_a, Actor(cast.carol), "Shop", "shop")
    long_ago = timezone.now() - timedelta(hours=1)
    run = Run.objects.create(
        workspace=workspace,
        commit="a" * 40,
        command="true",
        image=settings.SANDBOX_IMAGE,
        runtime="runc",
        limits={},
        state=RunState.PREPARING,
        admitted_at=long_ago,
        runner_host=settings.SANDBOX_HOST,  # placed here at its admission
        started_at=long_ago,
        prepare_sent_at=long_ago,
    )
    container = engine().containers.create(
        settings.SANDBOX_IMAGE,
        ["true"],
        name=resource_name("run", run.public_id),
        network_mode="none",
        labels={**instance_label(), "berth.kind": "run", "berth.owner": run.public_id},
    )
    try:
        call_command("runner_agent", once=True)
        run.refresh_from_db()
        assert run.prepare_sent_at is not None and run.prepare_sent_at > long_ago
    finally:
        # The task sent again may reach a worker that replaces the container first.
        with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
            container.remove(force=True)
