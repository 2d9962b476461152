from django.apps import AppConfig


class DeploysConfig(AppConfig):
    name = "deploys"

    def ready(self) -> None:
        from deploys import actions
        from previews.models import preview_changed
        from runs.models import run_finished

        run_finished.connect(actions.on_build_finished, dispatch_uid="deploys.build")
        preview_changed.connect(actions.on_process_changed, dispatch_uid="deploys.process")
