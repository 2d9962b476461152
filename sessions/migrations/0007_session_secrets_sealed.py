from django.db import migrations, models


def seal_for_hosts(apps, schema_editor):
    """Values were read from the stored secrets by the host that used them; now they
    are sealed for it on the web side (runs.secrets.seal_for). Sealed here for what
    may use them after the upgrade: each session's masking set, and the granted values
    of each admitted run not prepared yet (a prepared one sealed them already, with the
    web key, which the web host still opens)."""
    from runs import secrets

    Secret = apps.get_model("runner", "Secret")
    Session = apps.get_model("live_sessions", "Session")
    Run = apps.get_model("runner", "Run")

    def values(workspace_id, names):
        rows = Secret.objects.filter(workspace_id=workspace_id, name__in=list(names))
        return {row.name: secrets.decrypt(row.ciphertext) for row in rows}

    for session in Session.objects.exclude(secret_names=[]).exclude(state="deleted"):
        session.secrets_sealed = secrets.seal_for(
            session.runner_host, values(session.workspace_id, session.secret_names)
        )
        session.save(update_fields=["secrets_sealed"])
    waiting = Run.objects.filter(
        state__in=("queued", "preparing"), admitted_at__isnull=False, secrets_sealed=""
    ).exclude(secret_names=[])
    for run in waiting:
        run.secrets_sealed = secrets.seal_for(
            run.runner_host, values(run.workspace_id, run.secret_names)
        )
        run.save(update_fields=["secrets_sealed"])


class Migration(migrations.Migration):
    dependencies = [
        ("runner", "0018_prepare_lease"),
        ("live_sessions", "0006_session_runner_host"),
    ]

    operations = [
        migrations.AddField(
            model_name="session",
            name="secrets_sealed",
            field=models.TextField(blank=True),
        ),
        migrations.RunPython(seal_for_hosts, migrations.RunPython.noop),
    ]
