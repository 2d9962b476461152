from django.apps import AppConfig


class PreviewsConfig(AppConfig):
    name = "previews"

    def ready(self) -> None:
        # Once the app registry is ready: these modules import models.
        from previews import actions
        from previews.quota import usage
        from runs import quotas
        from runs.models import run_finished
        from workspaces.signals import branch_moved

        quotas.USAGE_PARTS["previews"] = usage
        run_finished.connect(actions.on_run_finished, dispatch_uid="previews.run_finished")
        branch_moved.connect(actions.on_branch_moved, dispatch_uid="previews.branch_moved")
