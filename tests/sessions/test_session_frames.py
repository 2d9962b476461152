"""An exec's frames as the channel in the image writes them, read by the agent's
follower: only a frame signed with its exec's key and numbered past the last one
counts, and the numbers survive an agent restart through the cursor.

The frames come from the channel's own code (sandbox/in_image/berth_session.py,
loaded here with its stdout captured), so the test holds the two ends to one format.
The end-to-end attack (a command writing to /proc/1/fd/1 under gVisor) is in
test_session_doors.py.
"""

import asyncio
import base64
import importlib.util
import io
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone

from accounts.access import Actor
from logs import logstore
from logs.shipped import ShippedLog, run_log
from runs.secret_actions import set_secret
from sandbox.models import Sandbox
from sessions.channel import channel_key
from sessions.follow import SessionFollower, cursor_path, read_cursor
from sessions.frames import frame_key
from sessions.models import Exec
from tests.support.hosts import local_host
from tests.support.runs import make_run
from tests.support.secrets import VALUE
from tests.support.sessions import session_row
from workspaces.actions import create_workspace

# The follower closes its connection between lookups, as in the agent, and sends its
# logs to the web host (daphne) as the agent does: rows committed.
pytestmark = [pytest.mark.usefixtures("berth_server")]

IN_IMAGE = Path(__file__).resolve().parents[2] / "sandbox" / "in_image"


@pytest.fixture(scope="module")
def channel():
    """The channel module as baked into the image, its stdout a buffer."""
    sys.path.insert(0, str(IN_IMAGE))
    try:
        spec = importlib.util.spec_from_file_location(
            "berth_session", IN_IMAGE / "berth_session.py"
        )
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(IN_IMAGE))
    return module


@pytest.fixture
def running(cast) -> tuple[Exec, SessionFollower]:
    local_host()
    workspace = create_workspace(cast.team_a, Actor(cast.alice), "Shop", "shop")
    run = make_run(workspace, cast.carol, purpose="session", runner_host=settings.SANDBOX_HOST)
    sandbox = Sandbox.objects.create(name=f"berth-test-{run.public_id}")
    session = session_row(
        workspace, requested_by=cast.carol, run=run, runner_host=settings.SANDBOX_HOST
    )
    row = Exec.objects.create(session=session, command="echo hi", timeout_s=60)
    assert row.mark_running(1)
    return row, SessionFollower(run.public_id, sandbox, asyncio.new_event_loop())


class Stamps:
    """Engine timestamps (RFC 3339, nanoseconds), each a millisecond after the last."""

    def __init__(self) -> None:
        self.second = timezone.now().strftime("%Y-%m-%dT%H:%M:%S")
        self.ms = 0

    def __call__(self) -> str:
        self.ms += 1
        return f"{self.second}.{self.ms:03d}000000Z"


def signed(
    channel, exec_id: str, texts: list[bytes], key: bytes | None = None, after: int = 0
) -> list[bytes]:
    """Frames of stdout lines, written by the channel's own `frame`, numbered from
    `after` + 1."""
    out = io.BytesIO()
    channel.OUT = out
    run = channel.Exec(exec_id, None, key if key is not None else frame_key(exec_id))
    run.seq = after
    for text in texts:
        channel.frame(run, b"o", base64.b64encode(text))
    return out.getvalue().splitlines(keepends=True)


def feed(follower: SessionFollower, lines: list[bytes], stamp: Stamps) -> None:
    writer = ShippedLog(run_log(follower.run_id))
    for line in lines:
        follower.store_frame(writer, "stdout", stamp(), line)
    writer.flush()
    follower.flushed(writer)
    writer.close()


def texts(row: Exec) -> list[str]:
    return [e["text"] for e in logstore.read(row.public_id, 0)]


def test_only_its_own_keys_frames_count_once_each_in_order(channel, running):
    row, follower = running
    stamp = Stamps()
    good = signed(channel, row.public_id, [b"one", b"two", b"three"])
    # Another key, numbered as the next frame would be and past it.
    forged = signed(channel, row.public_id, [b"forged", b"forged"], key=b"k" * 32, after=1)
    unsigned = [b"\x1e" + row.public_id.encode() + b" o " + base64.b64encode(b"old") + b"\n"]
    feed(follower, [good[0], *forged, *unsigned, good[0], good[1]], stamp)
    assert texts(row) == ["one", "two"]
    # Frame 3 after a gap of none: taken; frame 2 again (a repeat): dropped.
    feed(follower, [good[2], good[1]], stamp)
    assert texts(row) == ["one", "two", "three"]


def test_a_gap_in_the_numbers_is_said_in_the_log(channel, running):
    row, follower = running
    stamp = Stamps()
    frames = signed(channel, row.public_id, [b"a", b"b", b"c", b"d"])
    feed(follower, [frames[0], frames[3]], stamp)
    assert texts(row) == ["a", "[berth] 2 frame(s) of this exec's output never arrived", "d"]


def test_the_numbers_survive_an_agent_restart_through_the_cursor(channel, running):
    row, follower = running
    stamp = Stamps()
    frames = signed(channel, row.public_id, [b"a", b"b", b"c"])
    feed(follower, frames[:2], stamp)
    # A new follower (the agent restarted) takes the numbers from the cursor as it
    # starts following (SessionFollower._follow).
    again = SessionFollower(follower.run_id, Sandbox.objects.get(), asyncio.new_event_loop())
    _, again.resumed_seqs = read_cursor(cursor_path(follower.run_id))
    assert again.resumed_seqs == {row.public_id: 2}
    feed(again, [frames[1], frames[2]], stamp)  # frame 2 written again: a repeat
    assert texts(row) == ["a", "b", "c"]


def test_once_keyed_only_the_channels_signed_lines_reach_the_run_log_masked(channel, running, cast):
    """The session run's log (docs/security.md, 26): before the channel is keyed only it
    runs in the container, so its lines are kept; from its first signed line on, a line
    it did not sign (a process writing to /proc/1/fd/1 under gVisor) is dropped and
    counted, and a forged own line too. What is kept is masked with the session's
    granted values."""
    row, follower = running
    set_secret(row.session.workspace, Actor(cast.alice), "API_KEY", VALUE)
    assert row.session.grant(["API_KEY"])  # as an exec granted it: sealed for its host
    sandbox = Sandbox.objects.get()
    out = io.BytesIO()
    channel.OUT = out
    own = channel.SignedLines(channel.Signer("_", channel_key(sandbox.public_id)))
    forger = channel.SignedLines(channel.Signer("_", b"k" * 32))

    def signed_by(lines, text: str) -> bytes:
        out.seek(0)
        out.truncate()
        lines.write(text + "\n")
        return out.getvalue()

    keyed = signed_by(own, "[berth] the exec channel is keyed")
    forged = signed_by(forger, "[berth] forged")
    traceback = signed_by(own, f"Traceback: ValueError({VALUE!r})")
    feed(
        follower,
        [
            f"[berth] session ready {VALUE}\n".encode(),
            keyed,
            f"injected {VALUE}\n".encode(),
            forged,
            keyed,  # its own line again: a repeat
            traceback,
        ],
        Stamps(),
    )
    logged = [e["text"] for e in logstore.read(follower.run_id, 0)]
    assert logged[:3] == [
        "[berth] session ready ***",
        "[berth] the exec channel is keyed",
        "Traceback: ValueError('***')",
    ]
    assert len(logged) == 4 and logged[3].startswith("[berth] 3 line(s) the exec channel"), logged
    assert not any(VALUE in t or "injected" in t or "forged" in t for t in logged)
    # After an agent restart the follower knows the channel was keyed (the cursor).
    _, seqs = read_cursor(cursor_path(follower.run_id))
    assert seqs["_"] == 2
