from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"
    # The label the app had as runner/: tables (runner_run, ...), migrations and content
    # types of an existing install stay as they are.
    label = "runner"

    def ready(self) -> None:
        # Once the app registry is ready: prepare imports models.
        from runs.prepare import remove_workspace_sandboxes
        from workspaces.signals import workspace_deleting

        workspace_deleting.connect(remove_workspace_sandboxes, dispatch_uid="runs.workspace")
