"""Workspace secrets: encrypted at rest, handed to a run only by name, masked in outputs.

Values are Fernet tokens (AES-128-CBC + HMAC-SHA256) under a key of their own
(BERTH_SECRETS_KEY, else one generated into DATA_DIR: core.keys), so a copied database alone
reveals nothing and rotating SECRET_KEY loses nothing. That key is the web host's alone.
What a sandbox needs (a run's granted values and env, an exec's, a session's masking
set) is sealed on the web side for the host that runs it (`seal_for`), under that
host's key (core.keys.host_secrets_key), and opened there (`open_sealed`): a runner
host can read no other host's values, nor the stored secrets themselves.
"""

import json
from collections.abc import Iterable
from functools import cache

from cryptography.fernet import Fernet, InvalidToken

from accounts.secret_names import NAME, check_name
from core import keys
from runs.models import Run, Secret
from sandbox.models import this_host

__all__ = ["NAME", "check_name"]

MAX_VALUE_BYTES = 64 * 1024
MASK = "***"


@cache
def _fernet_of(key: str) -> Fernet:
    return Fernet(key.encode())


def _fernet() -> Fernet:
    # The key asked for each time (read once per process by core.keys): a runner host
    # is refused it however this process was used before.
    return _fernet_of(keys.SECRETS.value())


def encrypt(value: str) -> str:
    return _fernet().encrypt(value.encode()).decode()


def decrypt(ciphertext: str) -> str:
    try:
        return _fernet().decrypt(ciphertext.encode()).decode()
    except InvalidToken:
        raise RuntimeError(
            "a secret cannot be decrypted: BERTH_SECRETS_KEY or "
            f"{keys.SECRETS.path()} changed since it was set"
        ) from None


class Masker:
    """Replaces every exact occurrence of the granted values with ***.

    Longest values first, so a value that contains another is masked whole. Values
    shorter than 4 characters are still masked (the issue says any exact occurrence),
    which can hide innocent text: a reason to grant only what a run needs. Given names
    (a dict of name to value), it also says which secrets a piece of output holds.
    """

    def __init__(self, values: Iterable[str] | dict[str, str]) -> None:
        named = values if isinstance(values, dict) else {f"#{i}": v for i, v in enumerate(values)}
        self.values = sorted({v for v in named.values() if v}, key=len, reverse=True)
        self.raw = [v.encode() for v in self.values]
        self.named = sorted((name, value.encode()) for name, value in named.items() if value)

    def __bool__(self) -> bool:
        return bool(self.values)

    def text(self, text: str) -> str:
        for value in self.values:
            text = text.replace(value, MASK)
        return text

    def bytes(self, data: bytes) -> bytes:
        for value in self.raw:
            data = data.replace(value, MASK.encode())
        return data

    def scanner(self) -> "SecretScanner":
        return SecretScanner(self.named)

    def stream(self) -> "StreamMasker":
        return StreamMasker(self.raw)


class StreamMasker:
    """Masks a stream fed chunk by chunk (a terminal's output) without waiting for
    lines: a chunk's end that could be the start of a value is held back until the next
    chunk says whether it is one, and nothing else is ever held. `held` is how many
    bytes of what was fed are not yet given out."""

    def __init__(self, raw: list[bytes]) -> None:
        self.raw = raw
        self.pending = b""

    @property
    def held(self) -> int:
        return len(self.pending)

    def feed(self, chunk: bytes) -> bytes:
        if not self.raw:
            return chunk
        data = self.pending + chunk
        for value in self.raw:
            data = data.replace(value, MASK.encode())
        keep = self._prefix_at_end(data)
        self.pending = data[len(data) - keep :] if keep else b""
        return data[: len(data) - keep]

    def flush(self) -> bytes:
        out, self.pending = self.pending, b""
        return out

    def _prefix_at_end(self, data: bytes) -> int:
        """The length of the longest end of `data` that begins some value."""
        longest = 0
        for value in self.raw:
            for n in range(min(len(value) - 1, len(data)), longest, -1):
                if data.endswith(value[:n]):
                    longest = n
                    break
        return longest


class SecretScanner:
    """Finds granted values in a stream fed chunk by chunk: the last bytes of each chunk
    are kept and searched with the next, so a value split across two chunks is found."""

    def __init__(self, named: list[tuple[str, bytes]]) -> None:
        self.named = named
        self.keep = max((len(v) for _, v in named), default=1) - 1
        self.tail = b""
        self.found: set[str] = set()

    def feed(self, chunk: bytes) -> None:
        if not self.named:
            return
        window = self.tail + chunk
        self.found.update(name for name, value in self.named if value in window)
        self.tail = window[-self.keep :] if self.keep else b""

    def names(self) -> list[str]:
        # An earlier value is kept as `NAME#n` (`with_values`): said by its name.
        return sorted({name.split("#", 1)[0] for name in self.found})


def seal(values: dict[str, str]) -> str:
    """Sealed for the web side alone (a request's env values waiting for placement)."""
    return encrypt(json.dumps(values)) if values else ""


def unseal(sealed: str) -> dict[str, str]:
    return json.loads(decrypt(sealed)) if sealed else {}


FOR_HOST = "host:"  # `host:<name>:<token>`: sealed for one host (a plain token: `seal`)


def _host_fernet(host: str) -> Fernet:
    return _fernet_of(keys.host_secrets_key(host))


def seal_for(host: str, values: dict[str, str]) -> str:
    """`values` sealed for `host`, which alone (and the web host) can open them."""
    if not values:
        return ""
    token = _host_fernet(host).encrypt(json.dumps(values).encode()).decode()
    return f"{FOR_HOST}{host}:{token}"


def reseal_for(host: str, sealed: str) -> str:
    """What `seal` sealed on the web side, sealed for `host` now that it is placed."""
    return seal_for(host, unseal(sealed)) if sealed and not sealed.startswith(FOR_HOST) else sealed


def open_sealed(sealed: str) -> dict[str, str]:
    """The values in `sealed`: on a runner host only what was sealed for it (anything
    else is refused, never guessed at); the web host opens any (it derives every key)."""
    if not sealed:
        return {}
    if not sealed.startswith(FOR_HOST):
        # Sealed before values were sealed per host: the web key's (refused on a runner).
        return unseal(sealed)
    host, _, token = sealed[len(FOR_HOST) :].partition(":")
    if keys.is_runner() and host != this_host():
        raise RuntimeError(f"values sealed for host {host} reached host {this_host()}")
    try:
        return json.loads(_host_fernet(host).decrypt(token.encode()))
    except InvalidToken:
        raise RuntimeError(
            f"values sealed for host {host} do not open: its key is not the one the web "
            "host derives for it (`manage.py hosts key` prints it)"
        ) from None


def values_for(workspace_id: int, names: Iterable[str]) -> dict[str, str]:
    """The decrypted values of the named secrets of a workspace (absent names skipped)."""
    wanted = list(names)
    if not wanted:
        return {}
    rows = Secret.objects.filter(workspace_id=workspace_id, name__in=wanted)
    return {row.name: decrypt(row.ciphertext) for row in rows}


def placed(run: Run, host: str) -> tuple[str, str]:
    """A run's env values and its granted secrets' values sealed for the host it is
    placed on, as they are now: the values it starts with (`env_sealed`,
    `secrets_sealed`)."""
    return (
        reseal_for(host, run.env_sealed),
        seal_for(host, values_for(run.workspace_id, run.secret_names)),
    )


def with_values(masked: dict[str, str], granted: dict[str, str]) -> dict[str, str]:
    """A masking set (name: value) with `granted` added: a name whose value changed
    keeps its earlier values too, as `NAME#n`, since what an earlier one reached may
    still hold it (each value once)."""
    merged = dict(masked)
    for name, value in granted.items():
        earlier = merged.get(name)
        if earlier is not None and earlier != value and earlier not in _earlier(merged, name):
            n = 1
            while f"{name}#{n}" in merged:
                n += 1
            merged[f"{name}#{n}"] = earlier
        merged[name] = value
        for key in [k for k in _earlier_keys(merged, name) if merged[k] == value]:
            del merged[key]
    return merged


def _earlier_keys(masked: dict[str, str], name: str) -> list[str]:
    return [k for k in masked if k.startswith(name + "#")]


def _earlier(masked: dict[str, str], name: str) -> list[str]:
    return [masked[k] for k in _earlier_keys(masked, name)]
