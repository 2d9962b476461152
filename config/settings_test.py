"""Test overrides: only for speed and isolation, never to swap a real service out.

Integration tests still use the real Docker engine, Redis and a Celery worker.
"""

import os
import socket
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

# A data dir (and so a BERTH_INSTANCE) of its own, whatever DATA_DIR the shell exports:
# tests never touch a dev server's database, containers or volumes.
_data_dir = os.environ.get(
    "TEST_DATA_DIR", str(Path(__file__).resolve().parents[1] / "var" / "test")
)
# A pytest-xdist worker (`make test` runs several) has a folder of its own below it, so a
# BERTH_INSTANCE, queues, channel prefix, database and preview port of its own: workers
# share the engine and Redis as separate checkouts do. Done once per worker: the servers
# it starts inherit the worker's TEST_DATA_DIR and BERTH_TEST_WORKER and keep them.
_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
if _worker and os.environ.get("BERTH_TEST_WORKER") != _worker:
    _data_dir = str(Path(_data_dir) / _worker)
    os.environ["BERTH_TEST_WORKER"] = _worker
    os.environ["TEST_DATA_DIR"] = _data_dir
    # The controller chose one before the workers started, and they inherited it.
    os.environ.pop("TEST_PREVIEW_PORT", None)
    os.environ.pop("TEST_WEB_PORT", None)
os.environ["DATA_DIR"] = _data_dir
# The same Redis server, but a database of its own so a test run never consumes or
# floods a dev server's queues.
_redis = urlsplit(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
os.environ["REDIS_URL"] = os.environ.get("TEST_REDIS_URL", urlunsplit(_redis._replace(path="/9")))

# Preview and release hosts are served by a preview gateway on a port of its own
# (tests.support.servers starts it next to daphne). Chosen here, once, and handed to every
# subprocess through the environment, so the test process and the servers agree.
# TEST_PREVIEW_PORT, like TEST_DATA_DIR, so a dev server's PREVIEW_PORT is never used.
if not os.environ.get("TEST_PREVIEW_PORT"):
    with socket.socket() as _s:
        _s.bind(("127.0.0.1", 0))
        os.environ["TEST_PREVIEW_PORT"] = str(_s.getsockname()[1])
os.environ["PREVIEW_PORT"] = os.environ["TEST_PREVIEW_PORT"]
# The session's daphne (tests.support.fixtures) serves the internal API on this port:
# the test's worker and agent fetch a run's files from it as a runner host's do.
if not os.environ.get("TEST_WEB_PORT"):
    with socket.socket() as _s:
        _s.bind(("127.0.0.1", 0))
        os.environ["TEST_WEB_PORT"] = str(_s.getsockname()[1])

# The sandbox image of this checkout's own recipe (`berth-sandbox:bookworm-<hash>`, which
# `make test` builds), not whatever the shared `berth-sandbox:bookworm` alias points at:
# checkouts whose in-image files differ (sandbox/in_image) share one engine, and each
# must run its own exec channel. The recipe is plain module constants (no settings read).
if "SANDBOX_IMAGE" not in os.environ:
    from sandbox.images import REPOSITORY, recipe_tag

    os.environ["SANDBOX_IMAGE"] = f"{REPOSITORY}:{recipe_tag()}"

from config.settings import *  # noqa: E402,F403
from config.settings import DATA_DIR, DATABASES  # noqa: E402

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# The test process itself keeps no connection past a request or a task: a helper
# thread's kept connection would stop PostgreSQL from dropping the test database at
# the end. The servers it starts keep theirs, as in production (tests.support.servers).
if "DB_CONN_MAX_AGE" not in os.environ:
    DATABASES["default"]["CONN_MAX_AGE"] = 0

# A file, not an in-memory database, so a worker or a server subprocess can share it.
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["TEST"] = {"NAME": str(DATA_DIR / "test.sqlite3")}

from config.settings import BERTH_INSTANCE, BERTH_ROLE, SANDBOX_HOST  # noqa: E402

# Queues of their own: two test runs sharing one Redis never take each other's tasks.
CELERY_TASK_DEFAULT_QUEUE = f"celery-{BERTH_INSTANCE}"
RUNNER_QUEUE_PREFIX = f"runner-{BERTH_INSTANCE}"
CELERY_TASK_ROUTES = {
    "runner.tasks.apply_retention": {"queue": CELERY_TASK_DEFAULT_QUEUE},
    "runner.tasks.evict_caches": {"queue": CELERY_TASK_DEFAULT_QUEUE},
    "runner.tasks.*": {"queue": f"{RUNNER_QUEUE_PREFIX}.{SANDBOX_HOST}"},
}

# Off only where a test starts servers with TEST_PREVIEW_CROSS_SITE_GUARD_OFF=1, to
# show that the attacks the guard stops do work without it (test_preview_cross_site.py).
PREVIEW_CROSS_SITE_GUARD = os.environ.get("TEST_PREVIEW_CROSS_SITE_GUARD_OFF") != "1"

# Admission: room for the fairness tests' two teams, whatever this machine's cores.
RUNNER_SLOTS = 6

# This machine's host reaches the session's daphne with a token the test database's host
# row keeps (tests.support.hosts.local_host), as `manage.py prepare` makes one for
# `make run`. A runner host's processes are given their own, or none (the keys tests):
# Host B's (tests.support.engine_b).
BERTH_WEB_URL = os.environ.get("BERTH_WEB_URL") or f"http://localhost:{os.environ['TEST_WEB_PORT']}"
BERTH_HOST_TOKEN = os.environ.get("BERTH_HOST_TOKEN") or (
    "" if BERTH_ROLE == "runner" else "berth_host_the-test-suites-own-host"
)
