"""Test overrides: only for speed and isolation, never to swap a real service out.

Integration tests still use the real Docker engine, Redis and a Celery worker.
"""

import os
from pathlib import Path

os.environ.setdefault("DATA_DIR", str(Path(__file__).resolve().parents[2] / "var" / "test"))
# A Redis database of its own so a test run never touches a dev server's queues.
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/9")

from config.settings import *  # noqa: F403
from config.settings import DATA_DIR, DATABASES

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# A file, not an in-memory database, so a worker or a server subprocess can share it.
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["TEST"] = {"NAME": str(DATA_DIR / "test.sqlite3")}
