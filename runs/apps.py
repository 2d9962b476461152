from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"
    # The label the app had as runner/: tables (runner_run, ...), migrations and content
    # types of an existing install stay as they are.
    label = "runner"
