from django.apps import AppConfig


class PreviewsConfig(AppConfig):
    name = "previews"

    def ready(self) -> None:
        from previews import actions
        from runner.models import run_finished
        from workspaces.signals import branch_moved

        run_finished.connect(actions.on_run_finished, dispatch_uid="previews.run_finished")
        branch_moved.connect(actions.on_branch_moved, dispatch_uid="previews.branch_moved")
