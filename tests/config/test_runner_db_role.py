"""A runner host's PostgreSQL role (core.dbrole, docs/hosts.md): every row it needs, no
browser sessions, no invitations, no token or host token digests, no DDL; and Django,
signed in as that role, does what runners do with tokens and hosts. Host B's agent,
worker and gateway run under this role in tests/hosts/test_two_hosts.py."""

import subprocess
import sys

import psycopg
import pytest
from django.contrib.sessions.backends.db import SessionStore
from django.core.management import CommandError, call_command
from django.db import connection
from psycopg import errors

from accounts.access import Actor
from accounts.models import Invitation
from runs.models import Run
from sandbox.hosts import Host
from tests.support import engine_b
from tests.support.runs import waiting_runs
from tests.support.servers import subprocess_env
from workspaces import actions as workspace_actions

pytestmark = pytest.mark.postgres


def as_runner(url: str, statement: str) -> list[tuple]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(statement).fetchall()


def test_a_runner_role_reads_what_runners_need_and_nothing_that_signs_in(transactional_db, cast):
    token, _ = cast.token(cast.carol, ["run"])
    Invitation.mint(team=cast.team_a, created_by=cast.alice, expires_at=token.expires_at)
    session = SessionStore()
    session["who"] = "alice"
    session.create()
    Host.objects.create(name="b").issue_token()

    url = engine_b.runner_database_url()

    denied = [
        "SELECT * FROM django_session",
        "SELECT * FROM accounts_invitation",
        "SELECT * FROM accounts_tokendigest",
        "UPDATE accounts_tokendigest SET digest = 'x'",
        "SELECT * FROM sandbox_hosttoken",
        "INSERT INTO sandbox_hosttoken (host_id, digest) VALUES (1, 'x')",
        "CREATE TABLE runner_owned (id int)",
        "ALTER TABLE runner_run ADD COLUMN x int",
        # Read, never changed: a changed password, role or token owner signs in.
        "UPDATE auth_user SET password = 'x'",
        "UPDATE accounts_membership SET role = 'admin'",
        f"UPDATE accounts_apitoken SET user_id = user_id WHERE id = {token.pk}",
        "INSERT INTO accounts_apitoken (public_id) VALUES ('x')",
    ]
    for statement in denied:
        with pytest.raises(errors.InsufficientPrivilege):
            as_runner(url, statement)

    # What its gateway and agent do read and write.
    assert as_runner(
        url, f"SELECT public_id, revoked_at FROM accounts_apitoken WHERE id = {token.pk}"
    ) == [(token.public_id, None)]
    beat = "UPDATE sandbox_host SET heartbeat_at = now() WHERE name = 'b' RETURNING name"
    assert as_runner(url, beat) == [("b",)]
    assert as_runner(url, "SELECT count(*) FROM runner_run") == [(0,)]


def test_django_as_the_runner_role_reads_tokens_and_beats_its_host(transactional_db, cast):
    """What runner code does with these rows (a run with its token, a token with its
    user, a host's drain and beat), in a process signed in as the role."""
    shop = workspace_actions.create_workspace(cast.team_a, Actor(cast.carol), "Shop", "shop")
    token, _ = cast.token(cast.carol, ["run"])
    [run] = waiting_runs(shop, 1)
    Run.objects.filter(pk=run.pk).update(token=token)
    Host.objects.create(name="b").issue_token()
    url = engine_b.runner_database_url()

    script = (
        "from runs.models import Run; from sandbox.hosts import Host; "
        "from accounts.models import ApiToken; "
        f"run = Run.objects.select_related('token').get(pk={run.pk}); "
        "print(run.token.name, run.token.revoked_at); "
        f"print(ApiToken.objects.select_related('user').get(pk={token.pk}).user.username); "
        "host = Host.objects.get(name='b'); host.drain(); host.beat({'slots': 3}); "
        "print(host.state, host.slots)"
    )
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "--no-imports", "-c", script],
        env={**subprocess_env(), "DATABASE_URL": url},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"{token.name} None", "carol", "draining 3"]


def test_a_role_that_could_not_hold_a_grant_is_refused(transactional_db):
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_user")
        web = cursor.fetchone()[0]
        cursor.execute(
            "DO $$ BEGIN CREATE ROLE berth_mighty SUPERUSER; "
            "EXCEPTION WHEN duplicate_object THEN NULL; END $$"
        )
    # The web host's own role would lose its sign-ins' tables.
    with pytest.raises(CommandError, match="web host's own role"):
        call_command("hosts", "db-role", web)
    with connection.cursor() as cursor:
        cursor.execute(
            "DO $$ BEGIN CREATE ROLE berth_in_web NOSUPERUSER LOGIN; "
            "EXCEPTION WHEN duplicate_object THEN NULL; END $$"
        )
        cursor.execute(f"GRANT {web} TO berth_in_web")
    with pytest.raises(CommandError, match="member of, the web host's own role"):
        call_command("hosts", "db-role", "berth_in_web")
    with pytest.raises(CommandError, match="superuser"):
        call_command("hosts", "db-role", "berth_mighty")
    with pytest.raises(CommandError, match="Say which role"):
        call_command("hosts", "db-role")
