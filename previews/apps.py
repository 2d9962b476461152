from django.apps import AppConfig


class PreviewsConfig(AppConfig):
    name = "previews"
