"""Each run points to its Sandbox row; the sandboxes of runs still going are adopted
with the names their containers already have, so an upgrade finds and keeps them."""

from datetime import timedelta

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

from core.ids import new_id

ACTIVE = ("queued", "preparing", "running")
KINDS = {"run": "run", "preview": "service", "release": "service", "build": "build"}


def adopt(apps, schema_editor):
    Run = apps.get_model("runner", "Run")
    Sandbox = apps.get_model("sandbox", "Sandbox")

    for run in Run.objects.filter(state__in=ACTIVE, hydrated_at__isnull=False).select_related(
        "workspace"
    ):
        # The names and phases the previous release gave a run's containers.
        main_name = f"berth-{settings.BERTH_INSTANCE}-run-{run.public_id}"
        clock = run.hydrated_at or run.process_started_at
        service = run.purpose in ("preview", "release")
        try:
            timeout = int((run.limits or {}).get("timeout_s", 600))
        except (TypeError, ValueError):
            timeout = 600
        common = dict(
            owner_kind="run",
            owner_id=run.public_id,
            host=settings.SANDBOX_HOST,
            team_id=run.workspace.team_id,
            image=run.image,
            image_id=run.image_id,
            runtime=run.runtime,
            workdir="/app" if run.purpose in ("build", "release") else "/workspace",
            limits=run.limits,
            network=run.network,
            deadline=None if service else clock + timedelta(seconds=timeout),
            stop_reason=run.stop_reason,
            stop_requested_by=run.stop_requested_by,
            created_at=clock,
        )
        in_setup = run.phase == "setup"
        main = Sandbox.objects.create(
            public_id=new_id(),
            name=main_name,
            kind=KINDS.get(run.purpose, "run"),
            state="running" if run.state == "running" and not in_setup else "created",
            stop_signalled_at=None if in_setup else run.stop_signalled_at,
            cpu_seconds=float((run.cpu_by_phase or {}).get("main", 0)),
            **common,
        )
        run.sandbox = main
        run.save(update_fields=["sandbox"])
        if in_setup:
            deps = f"berth-{settings.BERTH_INSTANCE}-deps-{run.public_id}"
            Sandbox.objects.create(
                public_id=new_id(),
                name=f"{main_name}-setup",
                kind="setup",
                state="running" if run.state == "running" else "created",
                volumes=[main_name, deps],
                stop_signalled_at=run.stop_signalled_at,
                cpu_seconds=float((run.cpu_by_phase or {}).get("setup", 0)),
                **common,
            )


class Migration(migrations.Migration):
    dependencies = [
        ("runner", "0011_purpose_choices"),
        ("sandbox", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="sandbox",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="sandbox.sandbox",
            ),
        ),
        migrations.RunPython(adopt, migrations.RunPython.noop),
        migrations.RemoveField(model_name="run", name="stop_signalled_at"),
    ]
