from django.db import migrations


def pin(apps, schema_editor):
    """Deploy requests and releases recorded before pins existed keep their commits
    usable after a force-push, as new ones do."""
    PinnedCommit = apps.get_model("workspaces", "PinnedCommit")
    pairs = set()
    for model in ("DeployRequest", "Release"):
        pairs |= set(apps.get_model("deploys", model).objects.values_list(
            "workspace_id", "commit").distinct())
    PinnedCommit.objects.bulk_create(
        [PinnedCommit(workspace_id=w, sha=c) for w, c in pairs if c], ignore_conflicts=True,
        batch_size=500)


class Migration(migrations.Migration):
    dependencies = [("deploys", "0002_review_fixes"), ("workspaces", "0004_pinned_commits")]
    operations = [migrations.RunPython(pin, migrations.RunPython.noop)]
