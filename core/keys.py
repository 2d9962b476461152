"""The keys Berth keeps beside its data (docs/hosts.md, "Keys").

Each key comes from the environment, else from its file in DATA_DIR (0600), else it is
made once into that file. Two kinds:
- shared keys, which every host of an instance must hold the same: the channel layer's
  seal, workspace secrets' key (until part 2 seals them per host), the gateways' proof
  to daphne and the preview-cookie key. The web host makes them; a runner host
  (`BERTH_ROLE=runner`) never does: a key it made alone would match no other host's,
  so it refuses to start without them (`check_runner_keys`) and says where they come
  from;
- a host's own keys (its session channels' and exec frames' secret), made on the host
  that uses them and never shared.
A runner host holds no key that signs browser sessions or API tokens: its SECRET_KEY is
a throwaway of each process (config.settings).
"""

import contextlib
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


class MissingKey(ImproperlyConfigured):
    """A runner host without a key it must be given; the message says which and how."""


def kept(path: Path, make: Callable[[], str], valid: Callable[[str], bool], may_make: bool) -> str:
    """The key in `path`, made once (`make()`) when it is absent and `may_make`.
    Processes starting at once all end up with the one key: it is written aside,
    whole and synced, then linked into place (the first link wins). A file that does
    not hold a valid key (cut short by a crash, emptied by hand) is refused, never
    replaced: what it keyed would be lost."""
    if not path.exists():
        if not may_make:
            raise MissingKey(f"{path} is missing")
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        temp = path.with_name(f".{path.name}-{secrets.token_hex(4)}")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(make())
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(temp, path)
            except FileExistsError:
                pass  # another process won: its key is the one
            except OSError:  # a filesystem without hard links: a plain rename
                if not path.exists():
                    os.replace(temp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
    text = path.read_text().strip()
    if not valid(text):
        raise ImproperlyConfigured(
            f"{path} does not hold a valid key. Restore it from a backup (or remove it to "
            "have a new one made, losing what the old one sealed), then start Berth again."
        )
    return text


def _hex64(text: str) -> bool:
    return len(text) == 64 and all(c in "0123456789abcdef" for c in text)


def _fernet_key(text: str) -> bool:
    from cryptography.fernet import Fernet

    try:
        Fernet(text.encode())
    except ValueError:
        return False
    return True


_read: dict[Path, str] = {}


@dataclass(frozen=True)
class SharedKey:
    name: str
    env: str
    file: str
    make: Callable[[], str]
    valid: Callable[[str], bool]

    def path(self) -> Path:
        return Path(settings.KEYS_DIR) / self.file

    def value(self) -> str:
        given = str(getattr(settings, self.env, "")).strip()
        if given:
            if not self.valid(given):
                raise ImproperlyConfigured(f"{self.env} does not hold a valid {self.name} key.")
            return given
        path = self.path()
        # Read once per process (a file's key never changes under a running process):
        # the gateway's proof and the cookie key are asked for on every request.
        if (found := _read.get(path)) is not None:
            return found
        try:
            _read[path] = kept(path, self.make, self.valid, may_make=not is_runner())
            return _read[path]
        except MissingKey:
            raise MissingKey(
                f"This runner host has no {self.name} key: set {self.env}, or copy "
                f"{self.file} from the web host's DATA_DIR into {settings.KEYS_DIR} (0600). "
                "A runner host never makes a shared key: it would match no other host's."
            ) from None


def _fernet_new() -> str:
    from cryptography.fernet import Fernet

    return Fernet.generate_key().decode()


CHANNEL_LAYER = SharedKey(
    "channel-layer", "BERTH_CHANNEL_LAYER_KEY", "channel_layer.key",
    lambda: secrets.token_urlsafe(32), lambda t: len(t) >= 32,
)  # fmt: skip
SECRETS = SharedKey(
    "workspace secrets", "BERTH_SECRETS_KEY", "secrets.key", _fernet_new, _fernet_key
)
GATEWAY = SharedKey(
    "gateway", "BERTH_GATEWAY_KEY", "gateway.key", lambda: secrets.token_hex(32), _hex64
)
PREVIEW_COOKIE = SharedKey(
    "preview-cookie", "BERTH_PREVIEW_COOKIE_KEY", "preview_cookie.key",
    lambda: secrets.token_urlsafe(32), lambda t: len(t) >= 32,
)  # fmt: skip
SHARED = (CHANNEL_LAYER, SECRETS, GATEWAY, PREVIEW_COOKIE)


def is_runner() -> bool:
    return str(settings.BERTH_ROLE) == "runner"


def make_shared() -> list[Path]:
    """On the web host (`manage.py prepare`): every shared key made now, not at first
    use, so an operator adding a runner host has all of them to copy. The files
    holding them (a key given in the environment has none)."""
    if is_runner():
        raise MissingKey("A runner host makes no shared key: copy them from the web host.")
    for key in SHARED:
        key.value()
    return [key.path() for key in SHARED if key.path().exists()]


def check_runner_keys() -> None:
    """At a runner process's start: every shared key is there, or MissingKey naming
    all that are not (one start, one message, not one per try)."""
    if not is_runner():
        return
    missing = []
    for key in SHARED:
        try:
            key.value()
        except MissingKey:
            missing.append(f"{key.name} ({key.env}, or {key.file} from the web host)")
        except ImproperlyConfigured as e:  # there, but not a key: said as it is
            missing.append(f"{key.name}: {e}")
    if missing:
        raise MissingKey(
            "This runner host refuses to start without the instance's shared keys, which "
            f"only the web host makes. Missing: {'; '.join(missing)}. Copy them from the "
            f"web host's DATA_DIR into {settings.KEYS_DIR} (0600), or set the variables."
        )


def host_key_file(stem: str) -> str:
    """The file of a key of this host's own: `<stem>.key` on one machine (`local`), as
    it always was; `<stem>.<host>.key` elsewhere, so hosts that share a DATA_DIR (part
    1) still each hold their own."""
    host = str(settings.SANDBOX_HOST)
    return f"{stem}.key" if host == "local" else f"{stem}.{host}.key"


def host_key(file: str) -> bytes:
    """A key of this host's own (64 hex characters in `file` under DATA_DIR), made here
    on first use: no other host ever needs it."""
    path = Path(settings.KEYS_DIR) / file
    if path not in _read:  # read once per process, as the shared ones
        _read[path] = kept(path, lambda: secrets.token_hex(32), _hex64, True)
    return bytes.fromhex(_read[path])
