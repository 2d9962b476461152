from django.apps import AppConfig


class DeploysConfig(AppConfig):
    name = "deploys"

    def ready(self) -> None:
        # Once the app registry is ready: these modules import models.
        from deploys import releasing
        from deploys.models import routed_process
        from previews import gate
        from previews.models import preview_changed
        from runs.models import run_finished

        # What a release host serves: the gateway asks previews, which cannot ask up.
        gate.register_release_routes(routed_process)

        run_finished.connect(releasing.on_build_finished, dispatch_uid="deploys.build")
        preview_changed.connect(releasing.on_process_changed, dispatch_uid="deploys.process")
