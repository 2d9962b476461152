"""How the settings read what they are given: environment variables, and the secrets
Berth keeps beside them in files (config.settings holds every value; this, only how).

Nothing here reads the environment on import: each function is called by the settings.
"""

import functools
import json
import os
import secrets
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

from django.core.exceptions import ImproperlyConfigured

from core.keys import kept


def envbool(name: str, default: str = "false") -> bool:
    return os.environ.get(name, default).strip().lower() in ("1", "true", "yes", "on")


def envint(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def envobject(name: str) -> dict[str, object]:
    """A JSON object (empty when unset), or a plain refusal naming the variable."""
    try:
        value = json.loads(os.environ.get(name) or "{}")
    except ValueError as e:
        raise ImproperlyConfigured(f"{name} is not JSON: {e}") from None
    if not isinstance(value, dict):
        raise ImproperlyConfigured(f"{name} must be a JSON object.")
    return value


def envlist(name: str, default: str = "") -> list[str]:
    return [v.strip() for v in os.environ.get(name, default).split(",") if v.strip()]


@functools.cache
def generated_secret_key(data_dir: Path) -> str:
    """The SECRET_KEY generated once into `data_dir`, read from there ever after.

    It keys session signing and the HMAC of API tokens, so it must survive restarts, and
    every process of the web host (daphne, the worker, the agent) must read the same one
    (core.keys.kept: processes starting at once agree on one). A runner host has none.
    """
    return kept(data_dir / "secret_key", lambda: secrets.token_urlsafe(50), bool, True)


def with_password(url: str, password_file: Path) -> str:
    """`url` with the password kept in `password_file`, unless it names one already
    (or there is no such file, or it is empty)."""
    parts = urlsplit(url)
    if parts.password is not None:
        return url
    try:
        password = password_file.read_text().strip()
    except FileNotFoundError:
        return url
    except PermissionError:
        raise ImproperlyConfigured(
            f"{password_file} (Redis's password) is not readable by this user: run Berth "
            "as the user `scripts/host-setup redis` made it for, or put the password in "
            "REDIS_URL (redis://:PASSWORD@host:port/db)"
        ) from None
    if not password:
        return url
    host = parts.netloc.rpartition("@")[2]
    netloc = f"{parts.username or ''}:{quote(password, safe='')}@{host}"
    return urlunsplit(parts._replace(netloc=netloc))
