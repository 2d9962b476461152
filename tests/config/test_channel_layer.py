"""Channel-layer messages are sealed with the instance's own key (core.channel_layer): a
message pushed into Redis by anyone else — as the issue's attacker typed into another
person's terminal — is logged and dropped where it is received, and the receiver goes on
to the next message, on a process's own channel and on a plain one alike."""

import asyncio
import logging
import time

import msgpack
import redis
from asgiref.sync import async_to_sync
from channels.layers import channel_layers, get_channel_layer
from channels_redis.core import RedisChannelLayer
from django.conf import settings

from core import keys
from core.channel_layer import SealedRedisChannelLayer

PREFIX_BYTES = 12  # channels_redis's random prefix before every stored message


def forge(layer: RedisChannelLayer, channel: str, message: dict) -> None:
    """What a Redis client without the key can do: put a plain msgpack body where the
    layer keeps the channel's messages."""
    key = layer.prefix + (layer.non_local_name(channel) if "!" in channel else channel)
    if "!" in channel:
        message = {**message, "__asgi_channel__": channel}
    body = b"\0" * PREFIX_BYTES + msgpack.packb(message)
    client = redis.Redis.from_url(settings.REDIS_URL)
    # Scored now, as the layer scores its own: older ones it expires unread.
    client.zadd(key, {body: time.time()})
    client.close()


def test_the_layer_seals_what_it_sends_with_a_key_of_its_own(tmp_path):
    channel_layers.backends.clear()
    layer = get_channel_layer()
    assert isinstance(layer, SealedRedisChannelLayer)
    sealed = layer.serialize({"type": "terminal.input", "data": b"ls\r"})
    assert b"terminal.input" not in sealed and b"ls\r" not in sealed
    # Another key (another instance, or SECRET_KEY's) opens nothing of it.
    other = RedisChannelLayer(symmetric_encryption_keys=[str(settings.SECRET_KEY)])
    try:
        other.deserialize(sealed)
    except Exception as e:
        assert type(e).__name__ == "InvalidToken"
    else:
        raise AssertionError("a message opened with SECRET_KEY")
    key_file = keys.CHANNEL_LAYER.path()
    assert key_file.stat().st_mode & 0o777 == 0o600
    assert key_file.read_text().strip() != str(settings.SECRET_KEY)
    channel_layers.backends.clear()


def test_a_forged_message_is_dropped_and_logged_and_the_receiver_goes_on(caplog):
    channel_layers.backends.clear()
    caplog.set_level(logging.WARNING, logger="berth.channel_layer")

    async def scenario() -> list[dict]:
        layer = get_channel_layer()
        own = await layer.new_channel()  # a consumer's (process-local) channel
        await layer.group_add("forged_test", own)
        plain = f"terminals.forged-{own[-8:]}"  # a plain one, as the terminal relay's
        got = []
        try:
            for channel in (own, plain):
                forge(layer, channel, {"type": "terminal.input", "data": b"rm -rf ~\r"})
                forge(layer, channel, {"type": "junk"} | {"x": 1})
                await layer.send(channel, {"type": "terminal.input", "data": b"echo ok\r"})
                got.append(await asyncio.wait_for(layer.receive(channel), 10))
            # A group's message after a forged one still arrives.
            forge(layer, own, {"type": "log.signal", "seq": 666})
            await layer.group_send("forged_test", {"type": "log.signal", "seq": 7})
            got.append(await asyncio.wait_for(layer.receive(own), 10))
        finally:
            await layer.group_discard("forged_test", own)
        return got

    got = async_to_sync(scenario)()
    assert got == [
        {"type": "terminal.input", "data": b"echo ok\r"},
        {"type": "terminal.input", "data": b"echo ok\r"},
        {"type": "log.signal", "seq": 7},
    ]
    dropped = [r.getMessage() for r in caplog.records if "did not seal" in r.getMessage()]
    assert len(dropped) == 5, dropped
    assert any("terminals.forged-" in m for m in dropped)
    channel_layers.backends.clear()
