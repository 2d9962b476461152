"""Marks that tell the truth. `make check` runs the tests without `docker`, `servers`,
`browser` or `alone` and must need no engine, server or browser; the PostgreSQL pass
runs those, the `servers` ones and the `postgres` ones (which need it, and fail on
SQLite); `make test` runs the `alone` tests after the
parallel workers. So a test's marks are checked where it reaches those things: the
engine through DOCKER_HOST, servers, stacks and browsers through `require` (called by the
helpers that start them). tests/conftest.py sets `current` before each test's set-up."""

import os

from django.conf import settings

from sandbox.engine import engine

# Fixtures that start a Celery worker and runner agent, or a whole stack (so the engine),
# and those that start daphne alone: a test using one (directly or through another
# fixture) is marked `docker`, or `servers`, by the conftest.
ENGINE = frozenset({"_run_stack", "stack"})
SERVERS = frozenset({"_daphne"})
# An engine no test without the mark can reach: its calls fail at once, naming the cause.
NO_ENGINE = "unix:///nonexistent/a-test-without-the-docker-mark-reached-the-engine"

current: frozenset[str] = frozenset()
_saved_host = os.environ.get("DOCKER_HOST")


def enter(marks: set[str]) -> None:
    """The marks of the test about to be set up."""
    global current
    current = frozenset(marks)
    if "postgres" in current and settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        raise RuntimeError(
            "this test needs PostgreSQL (the `postgres` mark): run it in the PostgreSQL "
            "pass (`make test-postgres`, or DATABASE_URL set to a PostgreSQL server)"
        )
    host = _saved_host if "docker" in current else NO_ENGINE
    if os.environ.get("DOCKER_HOST") == host:
        return
    if host is None:
        del os.environ["DOCKER_HOST"]
    else:
        os.environ["DOCKER_HOST"] = host
    engine.cache_clear()  # the client is made again from the new DOCKER_HOST


def server_env(env: dict[str, str]) -> dict[str, str]:
    """`env` with the engine the run was given: a server (daphne, per worker, for the
    rest of the run) started by a test without `docker` must still reach it for the
    docker tests it serves later."""
    env = dict(env)
    if _saved_host is None:
        env.pop("DOCKER_HOST", None)
    else:
        env["DOCKER_HOST"] = _saved_host
    return env


def require(what: str, *allowed: str) -> None:
    """Fails unless the test carries one of the `allowed` marks."""
    if not current.intersection(allowed):
        raise RuntimeError(
            f"{what} needs the `{allowed[0]}` mark on the test (tests/support/marks.py; "
            f"one using {sorted(ENGINE)} gets `docker`, {sorted(SERVERS)} `servers`)"
        )
