from django.urls import re_path

from previews.consumers import PreviewLogConsumer, PreviewStateConsumer
from previews.navigations import NavigationConsumer

websocket_urlpatterns = [
    re_path(r"^ws/previews/(?P<preview_id>[a-z0-9]{1,12})/logs$", PreviewLogConsumer.as_asgi()),
    re_path(r"^ws/previews/(?P<preview_id>[a-z0-9]{1,12})/state$", PreviewStateConsumer.as_asgi()),
    re_path(
        r"^ws/previews/(?P<preview_id>[a-z0-9]{1,12})/navigations$", NavigationConsumer.as_asgi()
    ),
]
