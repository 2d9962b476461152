from django.db import migrations, models


def seal_for_hosts(apps, schema_editor):
    """Values were read from the stored secrets, or sealed with the web host's key, and
    opened by the host that used them; now they are sealed for that host on the web
    side (runs.secrets.seal_for), and a runner host opens nothing else. Sealed here for
    what may use them after the upgrade: each session's masking set, each admitted run
    not ended (its env, and its granted values, read now if it was not prepared yet),
    and each exec not ended."""
    from runs import secrets

    Secret = apps.get_model("runner", "Secret")
    Session = apps.get_model("live_sessions", "Session")
    Run = apps.get_model("runner", "Run")
    Exec = apps.get_model("live_sessions", "Exec")

    def values(workspace_id, names):
        rows = Secret.objects.filter(workspace_id=workspace_id, name__in=list(names))
        return {row.name: secrets.decrypt(row.ciphertext) for row in rows}

    for session in Session.objects.exclude(secret_names=[]).exclude(state="deleted"):
        session.secrets_sealed = secrets.seal_for(
            session.runner_host, values(session.workspace_id, session.secret_names)
        )
        session.save(update_fields=["secrets_sealed"])
    active = Run.objects.filter(
        state__in=("queued", "preparing", "running"), admitted_at__isnull=False
    ).exclude(runner_host="")
    for run in active:
        if run.secret_names and not run.secrets_sealed:
            run.secrets_sealed = secrets.seal_for(
                run.runner_host, values(run.workspace_id, run.secret_names)
            )
        run.secrets_sealed = secrets.reseal_for(run.runner_host, run.secrets_sealed)
        run.env_sealed = secrets.reseal_for(run.runner_host, run.env_sealed)
        run.save(update_fields=["secrets_sealed", "env_sealed"])
    for row in Exec.objects.filter(state__in=("queued", "running")).select_related("session"):
        host = row.session.runner_host
        row.env_sealed = secrets.reseal_for(host, row.env_sealed)
        row.secrets_sealed = secrets.reseal_for(host, row.secrets_sealed)
        row.save(update_fields=["env_sealed", "secrets_sealed"])


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
