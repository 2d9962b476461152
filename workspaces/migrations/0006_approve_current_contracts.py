"""When contract reviews begin, each workspace's contract on its default branch is
approved as it stands (issue: changes that widen what a sandbox may do wait for a
human). A workspace whose repository is missing, or whose file is invalid, gets none:
its asks are then compared with the defaults."""

from pathlib import Path

from django.conf import settings
from django.db import migrations
from django.utils import timezone

from core.ids import new_id


def approve_current(apps, schema_editor):  # type: ignore[no-untyped-def]
    # The pure parts only (the differ and the Git reader), never the live models.
    from workspaces import config as workspace_config
    from workspaces import contract
    from workspaces.gitstore import GitStore

    Workspace = apps.get_model("workspaces", "Workspace")
    ContractReview = apps.get_model("workspaces", "ContractReview")
    now = timezone.now()
    for workspace in Workspace.objects.select_related("team"):
        path = (
            Path(settings.DATA_DIR) / "repos" / workspace.team.public_id / f"{workspace.public_id}.git"
        )
        if not path.is_dir():
            continue
        store = GitStore(path)
        try:
            head = store.branch_head(workspace.default_branch)
            text = contract.text_at(store, head) if head else None
        finally:
            store.close()
        try:
            values = contract.asked(workspace_config.parse(text or ""))
        except workspace_config.ConfigError:
            continue
        ContractReview.objects.get_or_create(
            workspace=workspace,
            content_hash=contract.content_hash(values),
            defaults={
                "public_id": new_id(),
                "values": values,
                "state": "approved",
                "source": "initial",
                "commit": head or "",
                "ref": workspace.default_branch,
                "decided_at": now,
                "note": "The default branch's contract when contract reviews began.",
            },
        )


class Migration(migrations.Migration):
    dependencies = [("workspaces", "0005_contractreview")]

    operations = [migrations.RunPython(approve_current, migrations.RunPython.noop)]
