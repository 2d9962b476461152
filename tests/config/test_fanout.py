"""Wake-up signals from sync code (core.fanout) reach their group on the real Redis
channel layer, without the caller waiting for them."""

import asyncio

from asgiref.sync import async_to_sync
from channels.layers import channel_layers, get_channel_layer

from core import fanout


def test_a_signal_sent_from_sync_code_reaches_its_group():
    channel_layers.backends.clear()  # a layer of this test's own (see test_run_logs_doors)

    async def scenario() -> list[dict]:
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add("fanout_test", channel)
        try:
            # From a thread, as a view or a Celery task would: the call returns at once.
            await asyncio.to_thread(
                fanout.group_send, "fanout_test", {"type": "log.signal", "seq": 7}
            )
            await asyncio.to_thread(
                fanout.group_send, "fanout_test", {"type": "log.signal", "seq": 8}
            )
            got = [await asyncio.wait_for(layer.receive(channel), 10) for _ in range(2)]
        finally:
            await layer.group_discard("fanout_test", channel)
        return got

    got = async_to_sync(scenario)()
    assert sorted(m["seq"] for m in got) == [7, 8]
    channel_layers.backends.clear()
