from pathlib import Path

from django.conf import settings
from django.db import migrations


def read_key_entries(apps, schema_editor):
    """A runner host no longer opens a workspace's Git store to key a run's dependency
    cache: the `cache_key` entries are read when the run is queued (runs.caches.
    key_entries_at). Read here for the runs waiting to be prepared across the upgrade."""
    from core.errors import NotFound
    from workspaces.gitstore import GitStore

    Run = apps.get_model("runner", "Run")
    waiting = Run.objects.filter(state__in=("queued", "preparing")).select_related(
        "workspace__team"
    )
    for run in waiting:
        if not run.setup.get("command") or "key_entries" in run.setup:
            continue
        ws = run.workspace
        # Workspace.repo_path, which a migration's model does not have.
        path = Path(settings.DATA_DIR) / "repos" / ws.team.public_id / f"{ws.public_id}.git"
        entries = []
        try:
            store = GitStore(path, lambda sha: True)
        except Exception:  # its store gone: the run fails sandbox_failed at its prepare
            continue
        try:
            for name in run.setup.get("cache_key", []):
                try:
                    mode, sha = store.lookup(run.commit, name)
                except NotFound:
                    entries.append([name, None])
                    continue
                entries.append([name, mode, sha.decode()])
        except Exception:  # its commit gone: likewise (runs.caches.cache_key)
            continue
        finally:
            store.close()
        run.setup = {**run.setup, "key_entries": entries}
        run.save(update_fields=["setup"])


class Migration(migrations.Migration):
    dependencies = [
        ("runner", "0018_prepare_lease"),
    ]

    operations = [
        migrations.RunPython(read_key_entries, migrations.RunPython.noop),
    ]
