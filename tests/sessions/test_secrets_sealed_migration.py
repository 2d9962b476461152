"""live_sessions/0007: sessions granted secrets before values were sealed per host get
their masking set sealed for their host, and an admitted run not prepared yet its
granted values (a runner host would otherwise mask nothing, or run without them)."""

from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from accounts.access import Actor
from runs import secrets
from runs.secret_actions import set_secret
from workspaces import actions as workspace_actions

BEFORE = [("live_sessions", "0006_session_runner_host"), ("runner", "0018_prepare_lease")]


def test_granted_sessions_and_admitted_runs_are_sealed_for_their_hosts(transactional_db, cast):
    shop = workspace_actions.create_workspace(
        cast.team_a, Actor(cast.carol), "Shop", "shop", "python-http"
    )
    set_secret(shop, Actor(cast.alice), "API_KEY", "sk-old-1")
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    Session, Run = old.get_model("live_sessions", "Session"), old.get_model("runner", "Run")
    common = {"workspace_id": shop.pk, "ref": "main"}
    timers = {"idle_freeze_s": 60, "idle_stop_s": 600, "lifetime_s": 3600, "retention_s": 60}
    granted = Session.objects.create(
        **common, base_commit="0" * 40, runtime="runc", runner_host="b",
        secret_names=["API_KEY"], public_id="s1", **timers,
    )  # fmt: skip
    plain = Session.objects.create(
        **common, base_commit="0" * 40, runtime="runc", runner_host="b", public_id="s2", **timers
    )
    run_fields = {**common, "commit": "0" * 40, "command": "true", "image": "i", "runtime": "runc"}
    waiting = Run.objects.create(
        **run_fields, public_id="r1", state="queued", secret_names=["API_KEY"],
        runner_host="local", admitted_at="2026-12-07T00:00:00Z",
        env_sealed=secrets.seal({"MODE": "x"}),
    )  # fmt: skip
    running = Run.objects.create(
        **run_fields, public_id="r3", state="running", secret_names=["API_KEY"],
        runner_host="b", admitted_at="2026-12-07T00:00:00Z",
        secrets_sealed=secrets.seal({"API_KEY": "sk-old-1"}),
    )  # fmt: skip
    Exec = old.get_model("live_sessions", "Exec")
    queued_exec = Exec.objects.create(
        session=granted, public_id="e1", command="true", timeout_s=60,
        env_sealed=secrets.seal({"MODE": "y"}), secrets_sealed=secrets.seal({"API_KEY": "v"}),
    )  # fmt: skip
    unadmitted = Run.objects.create(
        **run_fields, public_id="r2", state="queued", secret_names=["API_KEY"]
    )
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())  # 0007, and all there is

    from runs.models import Run as NewRun
    from sessions.models import Session as NewSession

    sealed = NewSession.objects.get(pk=granted.pk).secrets_sealed
    assert sealed.startswith("host:b:")
    assert secrets.open_sealed(sealed) == {"API_KEY": "sk-old-1"}
    assert NewSession.objects.get(pk=plain.pk).secrets_sealed == ""
    run = NewRun.objects.get(pk=waiting.pk)
    assert run.secrets_sealed.startswith("host:local:")
    assert secrets.open_sealed(run.secrets_sealed) == {"API_KEY": "sk-old-1"}
    assert run.env_sealed.startswith("host:local:")
    assert secrets.open_sealed(run.env_sealed) == {"MODE": "x"}
    # Prepared already (sealed with the web key then): sealed for its host now.
    placed = NewRun.objects.get(pk=running.pk)
    assert placed.secrets_sealed.startswith("host:b:")
    assert secrets.open_sealed(placed.secrets_sealed) == {"API_KEY": "sk-old-1"}
    from sessions.models import Exec as NewExec

    waiting_exec = NewExec.objects.get(pk=queued_exec.pk)
    assert waiting_exec.env_sealed.startswith("host:b:")
    assert waiting_exec.secrets_sealed.startswith("host:b:")
    assert secrets.open_sealed(waiting_exec.env_sealed) == {"MODE": "y"}
    # Not admitted yet: its admission seals them (runs.quotas.admit).
    assert NewRun.objects.get(pk=unadmitted.pk).secrets_sealed == ""
