from django.db import migrations


def pin(apps, schema_editor):
    """Runs recorded before pins existed keep their commits usable (re-runnable, viewable)
    after a force-push, as new ones do."""
    Run = apps.get_model("runner", "Run")
    PinnedCommit = apps.get_model("workspaces", "PinnedCommit")
    pairs = Run.objects.values_list("workspace_id", "commit").distinct()
    PinnedCommit.objects.bulk_create(
        [PinnedCommit(workspace_id=w, sha=c) for w, c in pairs if c], ignore_conflicts=True,
        batch_size=500)


class Migration(migrations.Migration):
    dependencies = [("runner", "0007_quotas_cpu_days_build_labels"),
                    ("workspaces", "0004_pinned_commits")]
    operations = [migrations.RunPython(pin, migrations.RunPython.noop)]
