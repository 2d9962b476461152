import os

from celery import Celery
from celery.signals import worker_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("berth")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
def _runner_keys(**_: object) -> None:
    """A worker on a runner host refuses to start without the instance's shared keys
    (core.keys), before it takes a task it could not carry out. SystemExit: Celery
    logs and swallows a signal handler's exceptions."""
    from django.core.exceptions import ImproperlyConfigured

    from core import keys  # the settings are loaded by now

    try:
        keys.check_runner_keys()
    except ImproperlyConfigured as e:  # missing, or there but not a key
        raise SystemExit(str(e)) from None
