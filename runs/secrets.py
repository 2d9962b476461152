"""Workspace secrets: encrypted at rest, handed to a run only by name, masked in outputs.

Values are Fernet tokens (AES-128-CBC + HMAC-SHA256) under a key of their own
(BERTH_SECRETS_KEY, else one generated into DATA_DIR: core.keys), so a copied database alone
reveals nothing and rotating SECRET_KEY loses nothing.
"""

import json
from collections.abc import Iterable
from functools import cache

from cryptography.fernet import Fernet, InvalidToken

from accounts.secret_names import NAME, check_name
from core import keys
from runs.models import Secret

__all__ = ["NAME", "check_name"]

MAX_VALUE_BYTES = 64 * 1024
MASK = "***"


@cache
def _fernet() -> Fernet:
    return Fernet(keys.SECRETS.value().encode())


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
        return sorted(self.found)


def seal(values: dict[str, str]) -> str:
    return encrypt(json.dumps(values)) if values else ""


def unseal(sealed: str) -> dict[str, str]:
    return json.loads(decrypt(sealed)) if sealed else {}


def values_for(workspace_id: int, names: Iterable[str]) -> dict[str, str]:
    """The decrypted values of the named secrets of a workspace (absent names skipped)."""
    wanted = list(names)
    if not wanted:
        return {}
    rows = Secret.objects.filter(workspace_id=workspace_id, name__in=wanted)
    return {row.name: decrypt(row.ciphertext) for row in rows}
