"""ASGI entry point: HTTP to Django, WebSockets to Channels consumers.

Preview and release hosts (`*.PREVIEW_DOMAIN`, `*.APPS_DOMAIN`) are split off before
Django by `route_by_host`: the preview gateway serves them, and asks this process only
what to do with a request (previews.decide).
"""

import os

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.asgi import get_asgi_application

from config.request_threads import RequestThreads

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
# Daphne serves Berth's few static files itself: one process to run, nothing to
# collect, and the files are small and change only with a release. Each request's sync
# code runs on a kept thread (config.request_threads), not on one made for it.
django_asgi_app = RequestThreads(ASGIStaticFilesHandler(get_asgi_application()))

# Imported after Django is set up: consumers import models.
from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from config.routing import (  # noqa: E402
    BerthOriginValidator,
    route_by_host,
    websocket_urlpatterns,
)

application = ProtocolTypeRouter(
    {
        "http": route_by_host(django_asgi_app),
        "websocket": route_by_host(
            BerthOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))
        ),
    }
)
