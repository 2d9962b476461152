from django.db import migrations, models


def hosts_of_caches(apps, schema_editor):
    """A cache's volume is on the host of the run that filled it, else on this machine
    (one host until now)."""
    from django.conf import settings
    from django.db.models import OuterRef, Subquery
    from django.db.models.functions import Coalesce

    DepCache = apps.get_model("runner", "DepCache")
    Run = apps.get_model("runner", "Run")
    host = Run.objects.filter(pk=OuterRef("built_by_id")).exclude(runner_host="")
    DepCache.objects.update(
        host=Coalesce(
            Subquery(host.values("runner_host")[:1]), models.Value(settings.SANDBOX_HOST[:40])
        )
    )


class Migration(migrations.Migration):
    dependencies = [
        ("runner", "0016_runner_host"),
    ]

    operations = [
        migrations.AddField(
            model_name="depcache",
            name="host",
            field=models.CharField(default="", max_length=40),
            preserve_default=False,
        ),
        migrations.RunPython(hosts_of_caches, migrations.RunPython.noop),
        migrations.RemoveConstraint(model_name="depcache", name="one_cache_per_key"),
        migrations.AddConstraint(
            model_name="depcache",
            constraint=models.UniqueConstraint(
                "workspace", "key", "host", name="one_cache_per_key_and_host"
            ),
        ),
    ]
