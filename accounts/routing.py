from django.urls import re_path

from accounts.consumers import ActivityConsumer

websocket_urlpatterns = [
    re_path(r"^ws/t/(?P<team>[a-z0-9-]{1,30})/activity$", ActivityConsumer.as_asgi()),
]
