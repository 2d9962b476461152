from django.apps import AppConfig


class SessionsConfig(AppConfig):
    name = "sessions"
    # "sessions" is django.contrib.sessions' label (sign-in cookies).
    label = "live_sessions"
    verbose_name = "Sessions"

    def ready(self) -> None:
        # Once the app registry is ready: these modules import models. Registered here,
        # not imported by the rooms below: a session's container is followed by its own
        # demultiplexer, a session hears of its run's end and of writes on its branch,
        # and the team's usage counts its live sessions.
        from runs import quotas
        from runs.access import OUTPUT_CHECKS
        from runs.engine_owner import FOLLOWERS
        from runs.models import Purpose, run_finished
        from sandbox.models import SandboxKind
        from sessions.access import covers_run, on_session_granted
        from sessions.follow import SessionFollower
        from sessions.lifecycle import on_contract_lapsed, on_run_finished
        from sessions.policy import usage
        from sessions.signals import session_granted
        from sessions.sync import on_branch_moved
        from workspaces.signals import branch_moved, contract_lapsed

        FOLLOWERS[SandboxKind.SESSION] = SessionFollower
        # A session's run is read only by those who may use the session.
        OUTPUT_CHECKS[Purpose.SESSION] = covers_run
        # ...and its run's open log sockets hear of each new grant at once.
        session_granted.connect(on_session_granted, dispatch_uid="sessions.run_outputs")
        quotas.USAGE_PARTS["sessions"] = usage
        run_finished.connect(on_run_finished, dispatch_uid="sessions.run_finished")
        # A write on a branch answers once the sessions following it have it.
        branch_moved.connect(on_branch_moved, dispatch_uid="sessions.branch_moved")
        # An approval that lapsed stops the sessions it no longer admits.
        contract_lapsed.connect(on_contract_lapsed, dispatch_uid="sessions.contract_lapsed")
