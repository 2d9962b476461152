from django.apps import AppConfig


class DeploysConfig(AppConfig):
    name = "deploys"
