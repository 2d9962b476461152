"""The channel layer Berth uses: channels_redis, with every message sealed.

Redis asks for a password (scripts/host-setup redis), but whoever gets past it (a
leaked password, an operator's shared Redis) could otherwise push a message onto any
process's channel: keystrokes into another person's terminal, output onto their screen.
So each message is encrypted and authenticated (Fernet, channels_redis's
`symmetric_encryption_keys`) with a key of its own — never derived from SECRET_KEY, so
rotating one never breaks the other, and the database and Redis together still do not
give it. A message that does not open with the key is logged and dropped where it is
received: it never reaches a consumer, and never ends a receive loop (every loop that
receives, daphne's consumers, the terminal relay, the runner agent's, goes through
`receive_single`).
"""

import logging
import os
import secrets
import time
from pathlib import Path
from typing import Any

from channels_redis.core import RedisChannelLayer
from django.conf import settings

log = logging.getLogger("berth.channel_layer")


class UnsealedMessage(Exception):
    """A message on a channel that this instance's key did not seal."""


def layer_key() -> str:
    """BERTH_CHANNEL_LAYER_KEY, else the key generated once into DATA_DIR (0600) and
    read from there ever after: every process of an instance must share it."""
    if settings.CHANNEL_LAYER_KEY:
        return str(settings.CHANNEL_LAYER_KEY)
    path = Path(settings.CHANNEL_LAYER_KEY_FILE)
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        # O_EXCL: processes starting at once (a worker and an agent) agree on one key.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _written_by_another(path)
    key = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as f:
        f.write(key)
    return key


def _written_by_another(path: Path) -> str:
    """The key another process is writing: it writes 43 characters at once, so an
    empty read is only the moment between its open and its write."""
    deadline = time.monotonic() + 5
    while not (key := path.read_text().strip()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path} stays empty; remove it and start Berth again")
        time.sleep(0.01)
    return key


class SealedRedisChannelLayer(RedisChannelLayer):  # type: ignore[misc]  # untyped base
    """channels_redis's layer with this instance's key, dropping what it did not seal."""

    def __init__(self, **config: Any) -> None:
        if "symmetric_encryption_keys" not in config:
            config["symmetric_encryption_keys"] = [layer_key()]
        super().__init__(**config)

    def deserialize(self, message: bytes) -> Any:
        try:
            body = super().deserialize(message)
        except Exception as e:  # a bad token, or a body that is no message
            raise UnsealedMessage(type(e).__name__) from None
        if not isinstance(body, dict):
            raise UnsealedMessage("not a mapping")
        return body

    async def receive_single(self, channel: str) -> Any:
        # The message is already off the channel (and its backup cleared) when it fails
        # to open: the next one is simply waited for.
        while True:
            try:
                return await super().receive_single(channel)
            except UnsealedMessage as e:
                log.warning(
                    "dropped a message on channel %s that this instance's key did not "
                    "seal (%s): forged, sent with another BERTH_CHANNEL_LAYER_KEY, or "
                    "older than the layer's expiry",
                    channel,
                    e,
                )
