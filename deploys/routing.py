from django.urls import re_path

from deploys.consumers import DeployStateConsumer

websocket_urlpatterns = [
    re_path(r"^ws/deploys/(?P<deploy_id>[a-z0-9]{1,12})$", DeployStateConsumer.as_asgi()),
]
