from django.urls import re_path

from sessions.consumers import ExecLogConsumer, SessionStateConsumer

websocket_urlpatterns = [
    re_path(r"^ws/execs/(?P<exec_id>[a-z0-9]{1,12})/logs$", ExecLogConsumer.as_asgi()),
    re_path(r"^ws/sessions/(?P<session_id>[a-z0-9]{1,12})$", SessionStateConsumer.as_asgi()),
]
