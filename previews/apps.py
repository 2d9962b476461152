from django.apps import AppConfig


class PreviewsConfig(AppConfig):
    name = "previews"

    def ready(self) -> None:
        # Once the app registry is ready: these modules import models.
        from accounts.signals import access_lost
        from previews import lifecycle, of_sessions, viewers
        from previews.quota import usage
        from runs import quotas
        from runs.models import run_finished
        from sessions.lifecycle import register_published, register_served, session_moved
        from sessions.signals import session_granted
        from workspaces.signals import branch_moved, contract_lapsed

        quotas.USAGE_PARTS["previews"] = usage
        run_finished.connect(lifecycle.on_run_finished, dispatch_uid="previews.run_finished")
        branch_moved.connect(lifecycle.on_branch_moved, dispatch_uid="previews.branch_moved")
        contract_lapsed.connect(lifecycle.on_contract_lapsed, dispatch_uid="previews.lapsed")
        # Previews of a session follow it, and its freeze is told to the gateways first.
        session_moved.connect(of_sessions.on_session_moved, dispatch_uid="previews.sessions")
        register_served(of_sessions.served)
        # A session's new grant, a revoked token, a removed member: the gateways and
        # the web process drop their cached viewer answers (previews.lookups).
        session_granted.connect(of_sessions.on_session_granted, dispatch_uid="previews.grants")
        register_published(of_sessions.public_previews)
        access_lost.connect(viewers.on_access_lost, dispatch_uid="previews.access_lost")
