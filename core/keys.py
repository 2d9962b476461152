"""The keys Berth keeps beside its data (docs/hosts.md, "Keys").

Each key comes from the environment, else from its file in DATA_DIR (0600), else it is
made once into that file. Two kinds:
- shared keys, which every host of an instance must hold the same: the channel layer's
  seal, the gateways' proof to daphne and the preview-cookie key. The web host makes
  them; a runner host (`BERTH_ROLE=runner`) never does: a key it made alone would match
  no other host's, so it refuses to start without them (`check_runner_keys`) and says
  where they come from;
- the workspace secrets' key, the web host's alone: a runner host gets the values it
  needs sealed for it, under a key derived from that one and its name
  (`host_secrets_key`), which it is given and never derives;
- a host's own keys (its session channels' and exec frames' secret), made on the host
  that uses them and never shared.
A runner host holds no key that signs browser sessions or API tokens: its SECRET_KEY is
a throwaway of each process (config.settings).
"""

import base64
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


class NotOnRunner(ImproperlyConfigured):
    """Runner-side code asked for a key only the web host holds: a bug, said plainly."""


@dataclass(frozen=True)
class SharedKey:
    name: str
    env: str
    file: str
    make: Callable[[], str]
    valid: Callable[[str], bool]
    web_only: bool = False  # the web host's alone: a runner host never reads it

    def path(self) -> Path:
        return Path(settings.KEYS_DIR) / self.file

    def value(self) -> str:
        if self.web_only and is_runner():
            raise NotOnRunner(
                f"A runner host never holds the {self.name} key: what it needs of it "
                'reaches it sealed for its host (docs/hosts.md, "Keys").'
            )
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
    "workspace secrets", "BERTH_SECRETS_KEY", "secrets.key", _fernet_new, _fernet_key,
    web_only=True,
)  # fmt: skip
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
        if key.web_only:
            continue
        try:
            key.value()
        except MissingKey:
            missing.append(f"{key.name} ({key.env}, or {key.file} from the web host)")
        except ImproperlyConfigured as e:  # there, but not a key: said as it is
            missing.append(f"{key.name}: {e}")
    host = str(settings.SANDBOX_HOST)
    try:
        host_token()
    except MissingKey:
        missing.append(
            f"its token (BERTH_HOST_TOKEN, or {host_token_file(host)}: "
            f"`manage.py hosts add {host}` on the web host printed it)"
        )
    try:
        host_secrets_key(host)
    except MissingKey:
        missing.append(
            f"its secrets key (BERTH_HOST_SECRETS_KEY, or {host_secrets_file(host)}: "
            f"`manage.py hosts key {host}` on the web host prints it)"
        )
    except ImproperlyConfigured as e:
        missing.append(f"its secrets key: {e}")
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


def host_secrets_file(host: str) -> str:
    return f"host-secrets.{host}.key"


HOST_SECRETS_INFO = b"berth: workspace secrets sealed for host "


def host_secrets_key(host: str) -> str:
    """The Fernet key of the values sealed for `host` (runs.secrets.seal_for). The web
    host derives it from the workspace secrets key and the name (HKDF-SHA256), so it
    can seal for any host and keeps one key; a runner host holds its own alone, given
    as BERTH_HOST_SECRETS_KEY or `host-secrets.<host>.key` (never derived there, never
    made: it must be the web host's), and has none for another host."""
    if not is_runner():
        from cryptography.hazmat.primitives.hashes import SHA256
        from cryptography.hazmat.primitives.kdf.hkdf import HKDF

        root = base64.urlsafe_b64decode(SECRETS.value())
        derived = HKDF(SHA256(), 32, None, HOST_SECRETS_INFO + host.encode()).derive(root)
        return base64.urlsafe_b64encode(derived).decode()
    if host != str(settings.SANDBOX_HOST):
        raise NotOnRunner(
            f"Runner host {settings.SANDBOX_HOST} holds no key of host {host}: what is "
            f"sealed for {host} is read there."
        )
    given = str(settings.BERTH_HOST_SECRETS_KEY).strip()
    if given:
        if not _fernet_key(given):
            raise ImproperlyConfigured("BERTH_HOST_SECRETS_KEY does not hold a valid key.")
        return given
    path = Path(settings.KEYS_DIR) / host_secrets_file(host)
    if (found := _read.get(path)) is None:
        found = _read[path] = kept(path, _fernet_new, _fernet_key, may_make=False)
    return found


def host_token_file(host: str) -> str:
    return f"host-token.{host}"


def host_token() -> str:
    """This runner host's token for the web host's internal API (sandbox.webapi): given
    as BERTH_HOST_TOKEN or in `host-token.<host>` (what `manage.py hosts add` printed),
    never made here."""
    given = str(settings.BERTH_HOST_TOKEN).strip()
    if given:
        return given
    path = Path(settings.KEYS_DIR) / host_token_file(str(settings.SANDBOX_HOST))
    if (found := _read.get(path)) is None:
        found = _read[path] = kept(path, str, lambda t: t.startswith("berth_host_"), False)
    return found


def own_host_token(make: Callable[[], str]) -> str:
    """The web host's own token for its internal API, which its own worker and agent
    present as a runner host's do (one code path on one machine): given as
    BERTH_HOST_TOKEN, else made once (`make()`) into `host-token.<host>` beside its keys."""
    if is_runner():
        raise MissingKey("A runner host makes no token: `manage.py hosts add` gives it one.")
    given = str(settings.BERTH_HOST_TOKEN).strip()
    if given:
        return given
    path = Path(settings.KEYS_DIR) / host_token_file(str(settings.SANDBOX_HOST))
    return kept(path, make, lambda t: t.startswith("berth_host_"), may_make=True)
