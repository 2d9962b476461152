"""`manage.py hosts`: an operator adds, lists, drains, undrains and forgets the hosts
that run sandboxes (sandbox.hosts); a host's token is shown once and kept hashed."""

import io
import re

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

from accounts.access import Actor
from runs.models import Run, RunState
from sandbox.hosts import Host, HostState
from sandbox.models import Sandbox, SandboxKind, SandboxState
from tests.support.runs import waiting_runs
from workspaces import actions as workspace_actions


def hosts(*args: str) -> str:
    out = io.StringIO()
    call_command("hosts", *args, stdout=out)
    return out.getvalue()


def test_a_host_is_added_with_a_token_shown_once_and_kept_hashed(db, cast):
    said = hosts("add", "b")
    token = re.search(r"^(berth_host_\S+)$", said, re.MULTILINE)
    assert token, said
    assert "BERTH_SANDBOX_HOST=b" in said
    host = Host.objects.get(name="b")
    assert host.token.digest and token.group(1) not in host.token.digest
    assert host.token_matches(token.group(1)) and not host.token_matches(token.group(1) + "x")
    assert host.state == HostState.READY and host.heartbeat_at is None

    with pytest.raises(CommandError, match="exists already"):
        hosts("add", "b")
    for bad in ("B", "b.c", "b_c", "b" * 41, "1b"):
        with pytest.raises(CommandError, match="cannot name a host"):
            hosts("add", bad)
    assert set(Host.objects.values_list("name", flat=True)) == {"local", "b"}


def table(lines: list[str]) -> dict[str, list[str]]:
    """The list's rows by host, cut at the header's columns (a heartbeat is several
    words: "2s ago")."""
    header = lines[0]
    starts = [i for i, c in enumerate(header) if c != " " and (i == 0 or header[i - 1] == " ")]
    ends = [*starts[1:], None]
    rows = [[line[a:b].strip() for a, b in zip(starts, ends, strict=True)] for line in lines[1:]]
    return {row[0]: row for row in rows if row[0] and " " not in row[0]}


def test_the_list_says_each_hosts_state_heartbeat_runtimes_and_sandboxes(db, cast):
    hosts("add", "b")
    Host.objects.filter(name="b").update(runtimes={"runc": [], "runsc": ["--network=host"]})
    Sandbox.objects.create(host="b", kind=SandboxKind.RUN, owner_kind="run", owner_id="x1")
    Host.objects.filter(name="b").update(
        labels={"zone": "eu"}, gateway_address="b.internal:8001", memory_bytes=3 * 2**30
    )
    lines = hosts().splitlines()
    assert lines[0].split() == [
        "HOST", "STATE", "HEARTBEAT", "ENGINE", "RUNTIMES", "SANDBOXES", "SLOTS", "MEMORY",
        "IMAGES",
    ]  # fmt: skip
    # Local's heartbeat may be "never" or "2s ago": this worker's agent may beat.
    rows = table(lines[:3])
    assert rows["b"][7:] == ["3.0G", "0"]
    assert "b labels: zone=eu" in lines and "b gateway: b.internal:8001" in lines
    # b's runsc lacks --oci-seccomp: it would drop the sandbox's seccomp filter, so b is
    # no gVisor host; the cast's local row has both runtimes.
    assert rows["b"][:3] == ["b", "ready", "never"] and rows["b"][4:6] == ["runc", "1"]
    assert rows["local"][4] == "runc,gvisor" and rows["local"][5] == "0"


def test_drain_and_undrain_change_only_what_they_say(db, cast):
    hosts("add", "b")
    assert "draining" in hosts("drain", "b")
    assert Host.objects.get(name="b").state == HostState.DRAINING
    assert "nothing changed" in hosts("drain", "b")
    assert "ready" in hosts("undrain", "b")
    assert Host.objects.get(name="b").state == HostState.READY
    assert "nothing changed" in hosts("undrain", "b")
    with pytest.raises(CommandError, match=r"No host is named 'c' \(known: b, local\)"):
        hosts("drain", "c")
    with pytest.raises(CommandError, match="Say which host"):
        hosts("drain")


def test_a_host_with_live_sandboxes_is_not_forgotten(db, cast):
    hosts("add", "b")
    sandbox = Sandbox.objects.create(
        host="b", kind=SandboxKind.RUN, owner_kind="run", owner_id="x1", state="running"
    )
    with pytest.raises(CommandError, match="still holds 1 live sandbox"):
        hosts("forget", "b")
    assert Host.objects.filter(name="b").exists()
    Sandbox.objects.filter(pk=sandbox.pk).update(state=SandboxState.REMOVED)
    # Nor while a run placed there has not ended (its sandbox may not be made yet).
    shop = workspace_actions.create_workspace(cast.team_a, Actor(cast.carol), "Shop", "shop")
    [run] = waiting_runs(shop, 1)
    Run.objects.filter(pk=run.pk).update(runner_host="b", admitted_at=timezone.now())
    with pytest.raises(CommandError, match="1 run\\(s\\) placed there and not ended"):
        hosts("forget", "b")
    Run.objects.filter(pk=run.pk).update(state=RunState.CANCELLED)
    assert "Forgot host b" in hosts("forget", "b")
    assert not Host.objects.filter(name="b").exists()


def test_a_runner_role_is_granted_on_postgresql_only_and_only_when_it_exists(db):
    """Granted for real in tests/config/test_runner_db_role.py (PostgreSQL pass)."""
    refusal = "needs PostgreSQL" if connection.vendor == "sqlite" else "no role 'nobody_here'"
    with pytest.raises(CommandError, match=refusal):
        hosts("db-role", "nobody_here")
