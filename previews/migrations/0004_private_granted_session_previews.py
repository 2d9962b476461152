"""A session's preview made public before a granted session's preview could not be
(docs/security.md, 25) is made private: it would serve an app that can read the
session's granted values to anyone."""

from django.db import migrations


def make_private(apps, schema_editor):
    Preview = apps.get_model("previews", "Preview")
    granted = [
        preview.pk
        for preview in Preview.objects.filter(kind="session", public=True).select_related("session")
        if preview.session is not None and preview.session.secret_names
    ]
    Preview.objects.filter(pk__in=granted).update(public=False)


class Migration(migrations.Migration):
    dependencies = [
        ("previews", "0003_preview_of_session"),
        ("live_sessions", "0005_snapshot_scratch"),
    ]

    operations = [migrations.RunPython(make_private, migrations.RunPython.noop)]
