"""The runner agent reconciles: it removes this instance's orphans and nothing else."""

import pytest
from django.conf import settings
from django.core.management import call_command

from accounts.ids import new_id
from runner.engine import engine, instance_label, resource_name

pytestmark = pytest.mark.docker


def test_it_removes_this_instances_orphans_but_not_another_instances(transactional_db):
    mine = engine().containers.create(
        settings.SANDBOX_IMAGE, ["true"], name=resource_name("run", new_id()),
        labels={**instance_label(), "berth.kind": "run", "berth.owner": new_id()},
        network_mode="none",
    )
    other_instance = "other" + new_id(3)
    theirs = engine().containers.create(
        settings.SANDBOX_IMAGE, ["true"], name=f"berth-{other_instance}-run-{new_id()}",
        labels={"berth.instance": other_instance, "berth.kind": "run",
                "berth.owner": new_id()}, network_mode="none",
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
