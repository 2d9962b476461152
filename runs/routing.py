from django.urls import re_path

from runs.consumers import RunLogConsumer

websocket_urlpatterns = [
    re_path(r"^ws/runs/(?P<run_id>[a-z0-9]{1,12})/logs$", RunLogConsumer.as_asgi()),
]
