"""A runner host's client of the web host's internal API (config.internal_api,
docs/hosts.md "The internal API"): its token (core.keys.host_token) on every request,
the web host's error shape read back into one exception."""

import threading
from collections.abc import Iterator
from typing import Any

import requests
from django.conf import settings
from requests.adapters import HTTPAdapter
from urllib3.util import Retry

from core import keys

TIMEOUT_S = 30.0
CHUNK_BYTES = 256 * 1024
# A web host restarting (daphne under supervisord comes back in a second or two) is
# waited for a little before an answer says it is unavailable; only connecting is
# tried again here, so nothing is sent twice by this client (a caller that sends again,
# logs.shipped.patiently, uses it only where the web host keeps a repeat once).
RETRY = Retry(total=3, connect=3, read=0, status=0, other=0, backoff_factor=0.5)


class WebRefused(Exception):
    """The web host answered with an error: its status, code, message and details."""

    def __init__(
        self, status: int, code: str, message: str, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(f"the web host refused ({status} {code}): {message}")
        self.status, self.code, self.message = status, code, message
        self.details = details or {}


class WebUnavailable(Exception):
    """The web host did not answer (down, restarting, or the address is wrong)."""


class WebAPI:
    def __init__(self, base_url: str | None = None, token: str | None = None) -> None:
        self.base = (base_url or settings.BERTH_WEB_URL).rstrip("/") + "/internal/v1"
        self.http = requests.Session()
        self.http.mount("http://", HTTPAdapter(max_retries=RETRY))
        self.http.mount("https://", HTTPAdapter(max_retries=RETRY))
        try:
            token = token or keys.host_token()
        except keys.MissingKey as e:
            raise WebUnavailable(
                f"this host has no token for the web host's internal API ({e}): "
                "`manage.py prepare` makes the web host's own, `manage.py hosts add` "
                "prints a runner host's"
            ) from None
        self.http.headers["Authorization"] = f"Bearer {token}"

    def get(self, path: str) -> Any:
        return self._answer(self._send("GET", path))

    def post(self, path: str, body: dict[str, Any], timeout: float = TIMEOUT_S) -> Any:
        return self._answer(self._send("POST", path, json=body, timeout=timeout))

    def post_bytes(self, path: str, data: bytes) -> Any:
        """A piece of a file sent up (its place is in `path`): raw, never base64'd."""
        headers = {"Content-Type": "application/octet-stream"}
        return self._answer(self._send("POST", path, data=data, headers=headers))

    def download(self, path: str) -> bytes | Iterator[bytes]:
        """A file the web host sends: in one piece when it gave its length (small: read
        now), else chunk by chunk as the caller takes them (never held whole)."""
        response = self._send("GET", path, stream=True)
        if not response.ok:
            self._answer(response)
        if "Content-Length" in response.headers:
            try:
                return response.content
            except requests.RequestException as e:
                raise WebUnavailable(f"the web host at {self.base} broke off: {e}") from None

        def chunks() -> Iterator[bytes]:
            with response:
                try:
                    yield from response.iter_content(CHUNK_BYTES)
                except requests.RequestException as e:
                    raise WebUnavailable(f"the web host at {self.base} broke off: {e}") from None

        return chunks()

    def _send(
        self, method: str, path: str, timeout: float = TIMEOUT_S, **kwargs: Any
    ) -> requests.Response:
        try:
            return self.http.request(method, self.base + path, timeout=timeout, **kwargs)
        except requests.RequestException as e:
            raise WebUnavailable(f"the web host at {self.base} did not answer: {e}") from None

    def _answer(self, response: requests.Response) -> Any:
        if response.status_code >= 500:
            # Its proxy while daphne restarts, or a fault of its own: not an answer
            # about what was asked (tried again as a host that did not answer is).
            raise WebUnavailable(f"the web host at {self.base} answered {response.status_code}")
        if response.ok:
            try:
                return response.json()
            except ValueError:
                raise WebRefused(
                    response.status_code,
                    "not_berth",
                    "the answer is not JSON: is BERTH_WEB_URL the web host's address?",
                ) from None
        details: dict[str, Any] = {}
        try:
            error = response.json()["error"]
            code, message = str(error["code"]), str(error["message"])
            if isinstance(error.get("details"), dict):
                details = error["details"]
        except (ValueError, KeyError, TypeError):
            code, message = "unexpected", response.text[:200]
        raise WebRefused(response.status_code, code, message, details)


_local = threading.local()


def client() -> WebAPI:
    """This thread's client: one connection to the web host kept open across calls (a
    run's preparation would otherwise open a new one for each file it fetches)."""
    # Made again when where or as whom it calls changed (settings a test sets).
    key = (settings.BERTH_WEB_URL, settings.BERTH_HOST_TOKEN, str(settings.KEYS_DIR))
    found: tuple[tuple[str, str, str], WebAPI] | None = getattr(_local, "client", None)
    if found is None or found[0] != key:
        found = _local.client = (key, WebAPI())
    return found[1]


def check_identity() -> str:
    """At a runner agent's start: the web host takes its token for this host's. The
    host's name; WebRefused when the token is refused or names another host (a token
    copied to the wrong machine), WebUnavailable when the web host does not answer."""
    answer = WebAPI().get("/host")
    name = str(answer.get("name")) if isinstance(answer, dict) else "?"
    if name != settings.SANDBOX_HOST:
        raise WebRefused(
            403,
            "wrong_host",
            f"this token is host {name}'s, and this machine is {settings.SANDBOX_HOST}: give "
            "each host its own (BERTH_HOST_TOKEN)",
        )
    return name
