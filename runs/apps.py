from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"
    # The label the app had as runner/: tables (runner_run, ...), migrations and content
    # types of an existing install stay as they are.
    label = "runner"

    def ready(self) -> None:
        # Once the app registry is ready: the receivers import models.
        from runs.lapses import on_contract_lapsed
        from runs.prepare import remove_workspace_sandboxes
        from workspaces.signals import contract_lapsed, workspace_deleting

        contract_lapsed.connect(on_contract_lapsed, dispatch_uid="runs.contract_lapsed")
        workspace_deleting.connect(remove_workspace_sandboxes, dispatch_uid="runs.workspace")
