"""The OOM events the engine loop keeps (sandbox.ooms): Docker 20.10 may send a
container's `oom` event after its `die`, and then never sets its `OOMKilled`. The whole
path, engine to exec end, is held by tests/sessions/test_session_execs.py (gVisor's
memory kill); this holds the late event's rules, which that path meets only under load."""

import asyncio

from sandbox.ooms import OomEvents


def test_an_oom_event_after_the_die_is_awaited_and_one_that_never_comes_is_not_for_ever():
    async def scenario() -> tuple[bool, bool, bool]:
        events = OomEvents()
        waiting = asyncio.ensure_future(events.late("c1", within=5))
        await asyncio.sleep(0)  # it waits now
        events.saw("c1")  # the late event
        late = await waiting
        never = await events.late("c2", within=0.05)
        # Taken once: a second look at the same container says nothing came.
        again = await events.late("c1", within=0.05)
        return late, never, again

    assert asyncio.run(scenario()) == (True, False, False)


def test_an_oom_event_before_the_die_is_taken_at_once_and_only_for_its_container():
    async def scenario() -> tuple[bool, bool, bool]:
        events = OomEvents()
        events.saw("c1")
        other = events.take("c2")
        first = await events.late("c1", within=0)
        second = events.take("c1")
        return first, other, second

    assert asyncio.run(scenario()) == (True, False, False)


def test_events_nobody_takes_are_forgotten(monkeypatch):
    import sandbox.ooms as ooms

    clock = [1000.0]
    monkeypatch.setattr(ooms.time, "monotonic", lambda: clock[0])
    events = OomEvents()
    events.saw("old")
    clock[0] += ooms.KEEP_S + 1
    events.saw("new")
    assert set(events.seen) == {"new"}
