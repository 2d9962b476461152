"""Operator commands and environment-driven settings."""

import os
import subprocess
import sys

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.db import connection

from accounts.models import Membership, Team
from accounts.slugs import validate_slug
from core.errors import Invalid
from core.ids import new_id
from tests.support.servers import ROOT


def test_create_team_and_user_are_idempotent(db, capsys):
    call_command("create_team", "shop", name="Shop")
    call_command("create_team", "shop", name="Shop")
    assert Team.objects.filter(slug="shop").count() == 1
    call_command("create_user", "ann", team="shop", role="member")
    out = capsys.readouterr().out
    password = out.strip().splitlines()[-1].removeprefix("password: ")
    assert User.objects.get(username="ann").check_password(password)
    call_command("create_user", "ann", team="shop", role="reviewer")
    assert Membership.objects.get(user__username="ann").role == "reviewer"
    assert "password" not in capsys.readouterr().out


def test_create_user_needs_an_existing_team(db):
    with pytest.raises(CommandError, match="create_team nope"):
        call_command("create_user", "ann", team="nope", role="member")


def test_the_demo_admin_password_is_printed_once(db, capsys):
    call_command("ensure_demo")
    first = capsys.readouterr().out
    assert "username: admin" in first
    call_command("ensure_demo")
    assert capsys.readouterr().out == ""
    assert Membership.objects.get(user__username="admin", team__slug="demo").role == "admin"


@pytest.mark.parametrize("slug", ["a", "shop", "my-shop-2", "a" * 30])
def test_good_slugs(slug):
    assert validate_slug(slug) == slug


@pytest.mark.parametrize("slug", ["", "-a", "a-", "a--b", "A", "a_b", "a" * 31, "é", "a b", "../x"])
def test_bad_slugs_are_refused_with_a_clear_message(slug):
    with pytest.raises(Invalid, match="lowercase letters"):
        validate_slug(slug)


def test_public_ids_are_short_lowercase_and_hostname_safe():
    ids = {new_id() for _ in range(1000)}
    assert len(ids) == 1000
    assert all(len(i) == 12 and i.isalnum() and i == i.lower() for i in ids)


def settings_value(name: str, **env: str) -> str:
    code = (
        "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', "
        f"'config.settings'); from django.conf import settings; print(settings.{name})"
    )
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, check=True, capture_output=True, text=True
    ).stdout.strip()


def test_each_data_dir_is_its_own_instance_with_its_own_secret_key(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    instance_one = settings_value("BERTH_INSTANCE", DATA_DIR=str(one))
    assert instance_one == settings_value("BERTH_INSTANCE", DATA_DIR=str(one))
    assert instance_one != settings_value("BERTH_INSTANCE", DATA_DIR=str(two))
    key = settings_value("SECRET_KEY", DATA_DIR=str(one))
    assert len(key) > 40 and key == settings_value("SECRET_KEY", DATA_DIR=str(one))
    assert (one / "secret_key").stat().st_mode & 0o077 == 0
    assert settings_value("DEBUG", DATA_DIR=str(one)) == "False"


@pytest.mark.parametrize("module", ["config.settings", "config.settings_test"])
def test_importing_the_settings_writes_nothing(tmp_path, module):
    """A one-off script, a `check` or a test process leaves no trace: DATA_DIR and the
    generated key are made where they are first needed."""
    data_dir = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if k != "SECRET_KEY"}
    env.update(DATA_DIR=str(data_dir), TEST_DATA_DIR=str(data_dir), DJANGO_SETTINGS_MODULE=module)
    code = (
        "import django\n"
        "django.setup()\n"
        "from django.conf import settings\n"
        "print(settings.DATA_DIR, settings.BERTH_INSTANCE, settings.DATABASES)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(str(data_dir))
    assert not data_dir.exists()
    assert list(tmp_path.iterdir()) == []


def test_sqlite_is_set_up_for_concurrent_writers(db):
    if connection.vendor != "sqlite":
        pytest.skip("SQLite only")
    with connection.cursor() as c:
        c.execute("PRAGMA journal_mode")
        assert c.fetchone()[0] == "wal"
    assert connection.settings_dict["OPTIONS"]["transaction_mode"] == "IMMEDIATE"


def test_processes_starting_at_once_share_one_generated_secret_key(tmp_path):
    """A worker and an agent started together used to race to create DATA_DIR's key:
    the loser crashed at import. Now all read the one key the winner linked in place."""
    env = {k: v for k, v in os.environ.items() if k != "SECRET_KEY"}
    env.update(DATA_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="config.settings")
    # Each makes its key slowly, so all of them are making one at the same time: the old
    # code (create the file, then write it) let the others read an empty key or crash.
    code = (
        "import secrets, time\n"
        "make = secrets.token_urlsafe\n"
        "secrets.token_urlsafe = lambda n: (time.sleep(0.5), make(n))[1]\n"
        "from django.conf import settings\n"
        "print(settings.SECRET_KEY)"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(6)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
    keys = {out.strip() for out, _ in outs}
    assert len(keys) == 1 and len(keys.pop()) > 40
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secret_key"]  # no temp left


def test_app_url_defaults_to_where_make_run_serves_and_must_be_absolute(tmp_path):
    """Every link Berth hands out is under APP_URL (docs/security.md 38)."""
    base = {"DATA_DIR": str(tmp_path), "BERTH_PORT": "9000"}
    assert settings_value("APP_URL", **base) == "http://localhost:9000"
    assert settings_value("APP_URL", **base, BERTH_HOST="0.0.0.0") == "http://localhost:9000"
    named = settings_value("APP_URL", **base, BERTH_HOST="berth.internal")
    assert named == "http://berth.internal:9000"
    given = settings_value("APP_URL", **base, APP_URL="https://berth.example.com/")
    assert given == "https://berth.example.com"
    assert settings_value("APP_URL_GIVEN", **base) == ""
    code = "import django; django.setup()"
    relative = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**base, "APP_URL": "/berth", "DJANGO_SETTINGS_MODULE": "config.settings"},
        capture_output=True,
        text=True,
    )
    assert relative.returncode != 0
    assert "APP_URL must be an absolute http(s) URL, not '/berth'" in relative.stderr


def test_error_pages_hide_every_setting_that_carries_the_redis_password():
    """DEBUG's error page (and an admin's error mail) lists the settings: the Redis
    password rides in REDIS_URL, the broker URL and the channel layer's hosts."""
    from django.conf import settings
    from django.views.debug import get_default_exception_reporter_filter

    shown = get_default_exception_reporter_filter().get_safe_settings()
    for name in ("REDIS_URL", "CELERY_BROKER_URL", "CHANNEL_LAYERS", "DATABASES", "SECRET_KEY"):
        assert shown[name] == "********************", name
    assert shown["TIME_ZONE"] == settings.TIME_ZONE  # the others stay readable
