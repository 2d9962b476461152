from django.urls import re_path

from sessions.consumers import ExecLogConsumer, SessionStateConsumer
from sessions.terminal_consumer import TerminalConsumer

websocket_urlpatterns = [
    re_path(r"^ws/execs/(?P<exec_id>[a-z0-9]{1,12})/logs$", ExecLogConsumer.as_asgi()),
    re_path(r"^ws/sessions/(?P<session_id>[a-z0-9]{1,12})$", SessionStateConsumer.as_asgi()),
    re_path(r"^ws/terminals/(?P<terminal_id>[a-z0-9]{1,12})$", TerminalConsumer.as_asgi()),
]
