from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"
    # The label the app had as runner/: tables (runner_run, ...), migrations and content
    # types of an existing install stay as they are.
    label = "runner"

    def ready(self) -> None:
        # Once the app registry is ready: the receiver imports models.
        from runs.lapses import on_contract_lapsed
        from workspaces.signals import contract_lapsed

        contract_lapsed.connect(on_contract_lapsed, dispatch_uid="runs.contract_lapsed")
