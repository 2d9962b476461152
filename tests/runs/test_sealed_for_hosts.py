"""Values sealed for the host that uses them (runs.secrets, core.keys): the web host
seals a run's values when it places it, an exec's when it is asked for and a session's
masking set when an exec is granted a name or a changed value, each under a key
derived from the workspace secrets key and the host's name; a runner host opens what
was sealed for it alone, and never holds the workspace secrets key. The doors' half (a
granted secret reaching a run and an exec and masked in their outputs) is
tests/runs/test_secrets.py, tests/sessions/ and, on host b, tests/hosts/test_two_hosts.py."""

import io

import pytest
from django.core.management import call_command

from accounts.access import Actor
from core import keys
from runs import actions as run_actions
from runs import quotas, secrets
from runs.models import Run
from tests.support.hosts import local_host
from workspaces import actions as workspace_actions


@pytest.fixture
def shop(cast):
    return workspace_actions.create_workspace(
        cast.team_a, Actor(cast.carol), "Shop", "shop", "python-http"
    )


def as_runner(settings, host: str, key: str) -> None:
    settings.BERTH_ROLE = "runner"
    settings.SANDBOX_HOST = host
    settings.BERTH_HOST_SECRETS_KEY = key


def printed_key(host: str) -> str:
    out = io.StringIO()
    call_command("hosts", "key", host, stdout=out, stderr=io.StringIO())
    return out.getvalue().strip()


def test_a_runner_opens_what_was_sealed_for_it_and_nothing_else(settings, db):
    from sandbox.hosts import Host

    Host.objects.create(name="b")
    for_b = secrets.seal_for("b", {"API_KEY": "sk-b"})
    for_c = secrets.seal_for("c", {"API_KEY": "sk-c"})
    web_sealed = secrets.seal({"X": "y"})
    assert for_b.startswith("host:b:") and "sk-b" not in for_b
    # The web host opens any: it derives every host's key.
    assert secrets.open_sealed(for_b) == {"API_KEY": "sk-b"}
    assert keys.host_secrets_key("b") != keys.host_secrets_key("c")
    wrong = keys.host_secrets_key("c")

    as_runner(settings, "b", printed_key("b"))  # as the operator gave it
    assert secrets.open_sealed(for_b) == {"API_KEY": "sk-b"}
    with pytest.raises(RuntimeError, match="sealed for host c reached host b"):
        secrets.open_sealed(for_c)
    with pytest.raises(keys.NotOnRunner, match="never holds the workspace secrets key"):
        secrets.open_sealed(web_sealed)
    with pytest.raises(keys.NotOnRunner):
        secrets.seal_for("c", {"A": "b"})  # it holds no other host's key

    # Given another host's key, nothing opens, and it says where the right one comes from.
    settings.BERTH_HOST_SECRETS_KEY = wrong
    with pytest.raises(RuntimeError, match=r"manage\.py hosts key"):
        secrets.open_sealed(for_b)


def test_the_key_command_is_the_web_hosts_and_names_a_known_host(settings, db):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="No host is named 'nope'"):
        printed_key("nope")
    local_host()
    assert printed_key("local") == keys.host_secrets_key("local")
    settings.BERTH_ROLE = "runner"
    with pytest.raises(CommandError, match="Ask the web host"):
        printed_key("local")


def test_a_run_waiting_for_a_slot_gets_its_values_sealed_for_its_host_when_admitted(
    client, cast, shop
):
    cast.team_a.max_concurrent_runs = 1
    cast.team_a.save()
    local_host(slots=4)
    _, token = cast.token(cast.alice, ["workspace:read", "workspace:write"])
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    r = client.put(
        "/api/v1/workspaces/shop/secrets/API_KEY",
        {"value": "sk-live-1"},
        content_type="application/json",
        **headers,
    )
    assert r.status_code in (200, 201), r.content
    actor = Actor(cast.carol)
    first = run_actions.start_run(shop, actor, "true", secrets=["API_KEY"])
    second = run_actions.start_run(shop, actor, "true", secrets=["API_KEY"], env={"MODE": "x"})
    first.refresh_from_db()
    second.refresh_from_db()
    # Placed at once: sealed for its host then.
    assert first.runner_host == "local" and first.secrets_sealed.startswith("host:local:")
    assert secrets.open_sealed(first.secrets_sealed) == {"API_KEY": "sk-live-1"}
    # Waiting: its env sealed for the web side alone, no value sealed for any host yet.
    assert second.admitted_at is None and second.secrets_sealed == ""
    assert not second.env_sealed.startswith("host:")
    # The value changes while it waits; the first run ends and a slot is free.
    client.put(
        "/api/v1/workspaces/shop/secrets/API_KEY",
        {"value": "sk-live-2"},
        content_type="application/json",
        **headers,
    )
    Run.objects.filter(pk=first.pk).update(state="succeeded")
    assert quotas.admit() == [second.pk]
    second.refresh_from_db()
    assert second.secrets_sealed.startswith("host:local:")
    assert second.env_sealed.startswith("host:local:")
    assert secrets.open_sealed(second.secrets_sealed) == {"API_KEY": "sk-live-2"}
    assert secrets.open_sealed(second.env_sealed) == {"MODE": "x"}


@pytest.mark.docker
def test_a_runner_host_asks_the_web_hosts_worker_to_admit(settings, run_stack, cast, shop):
    """A run ending on a runner host frees a slot there, but admission seals with the
    web host's key: the runner sends `admit_runs` to the web queue, whose worker (the
    stack's, a web host's) admits the waiting run and seals its values for its host."""
    from tests.support.servers import wait_for

    set_secret_value(shop, cast, "sk-live-3")
    local_host(slots=4)
    cast.team_a.max_concurrent_runs = 0  # nothing is admitted at the door
    cast.team_a.save()
    waiting = run_actions.start_run(shop, Actor(cast.carol), "true", secrets=["API_KEY"])
    assert waiting.admitted_at is None
    cast.team_a.max_concurrent_runs = 4
    cast.team_a.save()
    as_runner(settings, "local", keys.host_secrets_key("local"))
    assert quotas.admit() == []  # not here: asked of the web host's worker
    settings.BERTH_ROLE = "all"
    admitted = wait_for(
        lambda: Run.objects.filter(pk=waiting.pk, admitted_at__isnull=False).first(),
        30,
        what="the web host's worker to admit it",
    )
    assert admitted.runner_host == "local"
    assert secrets.open_sealed(admitted.secrets_sealed) == {"API_KEY": "sk-live-3"}


def set_secret_value(workspace, cast, value: str) -> None:
    from runs.secret_actions import set_secret

    set_secret(workspace, Actor(cast.alice), "API_KEY", value)


def test_a_session_masks_a_changed_value_and_keeps_masking_the_earlier_one(cast, shop):
    from sessions.models import Session

    session = Session.objects.create(
        workspace=shop, ref="main", base_commit="0" * 40, runtime="runc", runner_host="local",
        idle_freeze_s=300, idle_stop_s=1800, lifetime_s=3600, retention_s=86400,
    )  # fmt: skip
    set_secret_value(shop, cast, "sk-first")
    assert session.grant(["API_KEY"]) is True
    assert session.grant(["API_KEY"]) is False  # nothing new: nothing sealed again
    set_secret_value(shop, cast, "sk-second")
    assert session.grant(["API_KEY"]) is True  # an exec granted the new value
    masked = secrets.open_sealed(Session.objects.get(pk=session.pk).secrets_sealed)
    assert sorted(masked.values()) == ["sk-first", "sk-second"]
    masker = secrets.Masker(masked)
    assert masker.text("sk-first then sk-second") == "*** then ***"
    scanner = masker.scanner()
    scanner.feed(b"an old sk-first")
    assert scanner.names() == ["API_KEY"]  # the earlier value is said by its name
    # Back to the first value: nothing more to keep.
    set_secret_value(shop, cast, "sk-first")
    assert session.grant(["API_KEY"]) is True
    again = secrets.open_sealed(Session.objects.get(pk=session.pk).secrets_sealed)
    assert sorted(again.values()) == ["sk-first", "sk-second"] and again["API_KEY"] == "sk-first"
