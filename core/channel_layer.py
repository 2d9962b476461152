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
from typing import Any

from channels_redis.core import RedisChannelLayer

from core import keys

log = logging.getLogger("berth.channel_layer")


class UnsealedMessage(Exception):
    """A message on a channel that this instance's key did not seal."""


def layer_key() -> str:
    """The instance's channel-layer key (core.keys): every process of every host of an
    instance must share it."""
    return keys.CHANNEL_LAYER.value()


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
