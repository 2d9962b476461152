"""A session's WebSocket doors: an exec's log (the run's log door, on the exec's log
and with the exec's access) and the session's state.

The test stands in for the runner agent: it writes the log with LogWriter, ends the
exec and moves the session as the agent does, and signals through the real Redis
channel layer.
"""

import time

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.utils import timezone

from accounts.access import Actor
from config.asgi import application
from logs import logstore
from logs.logstore import LogWriter
from runs.models import Purpose, RunState
from runs.secret_actions import set_secret
from sessions.actions import exec_in
from sessions.lifecycle import changed, group_name
from sessions.models import Exec, Session, SessionState
from tests.support.logs import closed_with, session_cookie
from tests.support.logs import write as write_run
from tests.support.runs import make_run
from tests.support.sessions import session_row
from workspaces.actions import create_workspace

pytestmark = [
    pytest.mark.usefixtures("data_dir", "fresh_channel_layer"),
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def session(cast) -> Session:
    workspace = create_workspace(cast.team_a, Actor(cast.alice), "Shop", "shop")
    return session_row(workspace, requested_by=cast.carol)


@pytest.fixture
def row(session) -> Exec:
    return Exec.objects.create(session=session, command="echo hi", timeout_s=60)


def write(row: Exec, lines: list[str]) -> None:
    with LogWriter(row.public_id) as w:
        for line in lines:
            count = w.append("stdout", f"{line}\n".encode(), None)
    logstore.signal(row.public_id, count)


def end(row: Exec) -> None:
    """What the session's follower does at an exec's end frame."""
    row.mark_running(1)
    row.finish("exit_zero", "The command exited with code 0.", exit_code=0)
    logstore.signal(row.public_id, logstore.count(row.public_id), ended=True)


async def connect(path: str, secret: str | None = None, cookie: str | None = None):
    headers = [(b"origin", b"http://localhost"), (b"host", b"localhost")]
    if secret:
        headers.append((b"authorization", f"Bearer {secret}".encode()))
    if cookie:
        headers.append((b"cookie", cookie.encode()))
    ws = WebsocketCommunicator(application, path, headers=headers)
    connected, _ = await ws.connect(timeout=5)
    assert connected
    return ws


async def texts_until(ws, seq: int) -> list[str]:
    entries: list[dict] = []
    while not entries or entries[-1]["seq"] < seq:
        message = await ws.receive_json_from(timeout=10)
        assert message["type"] == "entries", message
        entries += message["entries"]
    return [e["text"] for e in entries]


def test_an_execs_log_replays_streams_live_then_ends_with_its_reason(cast, row):
    _, secret = cast.token(cast.carol, ["run"])
    write(row, ["one"])

    async def watch() -> None:
        ws = await connect(f"/ws/execs/{row.public_id}/logs", secret=secret)
        assert await texts_until(ws, 1) == ["one"]
        await database_sync_to_async(write)(row, ["two", "three"])
        assert await texts_until(ws, 3) == ["two", "three"]
        await database_sync_to_async(end)(row)
        assert await ws.receive_json_from(timeout=5) == {
            "type": "end",
            "state": "ended",
            "reason": "exit_zero",
            "exit_code": 0,
            "message": "The command exited with code 0.",
        }
        assert await closed_with(ws) in (None, 1000)
        await ws.disconnect()

        # From a cursor, as a viewer reconnecting does: only what follows it.
        ws = await connect(f"/ws/execs/{row.public_id}/logs?after=2", secret=secret)
        assert await texts_until(ws, 3) == ["three"]
        assert (await ws.receive_json_from(timeout=5))["type"] == "end"
        await ws.disconnect()

    async_to_sync(watch)()


def test_another_team_and_a_token_without_the_sessions_grants_are_refused(cast, row, session):
    write(row, ["API_KEY=[masked]"])
    session.grant(["API_KEY"])
    _, charlie = cast.token(cast.charlie, ["run"])
    _, reader = cast.token(cast.carol, ["workspace:read"])
    _, ungranted = cast.token(cast.carol, ["run"])
    _, granted = cast.token(cast.carol, ["run"], secret_names=["API_KEY"])
    path = f"/ws/execs/{row.public_id}/logs"

    async def refused(**who) -> int | None:
        ws = await connect(path, **who)
        code = await closed_with(ws)
        await ws.disconnect()
        return code

    async def reads(**who) -> list[str]:
        ws = await connect(path, **who)
        texts = await texts_until(ws, 1)
        await ws.disconnect()
        return texts

    async def watch() -> None:
        assert await refused(secret=charlie) == 4404
        assert await refused() == 4404  # nobody signed in
        assert await refused(secret=reader) == 4403  # missing_scope
        assert await refused(secret=ungranted) == 4403  # secret_grant_required
        assert await reads(secret=granted) == ["API_KEY=[masked]"]
        # A member signed in may grant any secret of the workspace: covered.
        assert await reads(cookie=await database_sync_to_async(session_cookie)(cast.bob)) == [
            "API_KEY=[masked]"
        ]
        ws = await connect("/ws/execs/nosuchexec12/logs", secret=granted)
        assert await closed_with(ws) == 4404
        await ws.disconnect()

    async_to_sync(watch)()


def move(session: Session, to: str, reason: str = "") -> None:
    """A move as the keeper writes one, with its signal after commit."""
    fields = {"deleted_at": timezone.now()} if to == SessionState.DELETED else {}
    assert session.move(to, (session.state,), reason=reason, **fields)
    changed(session)


def test_the_state_door_says_each_state_then_closes_at_deleted(cast, session):
    _, secret = cast.token(cast.carol, ["run"])
    _, charlie = cast.token(cast.charlie, ["run"])
    session.grant(["API_KEY"])  # a state says nothing of secrets: no grant needed

    async def watch() -> None:
        ws = await connect(f"/ws/sessions/{session.public_id}", secret=charlie)
        assert await closed_with(ws) == 4404
        await ws.disconnect()

        ws = await connect(f"/ws/sessions/{session.public_id}", secret=secret)
        assert await ws.receive_json_from(timeout=5) == {
            "type": "state",
            "state": "starting",
            "reason": "",
        }
        await database_sync_to_async(move)(session, SessionState.READY)
        assert (await ws.receive_json_from(timeout=5))["state"] == "ready"
        # Signals sent to the session's group that this door has no use for (a sync
        # applied, a read of its files made): ignored, the socket goes on.
        for kind in ("session.synced", "session.snapshot"):
            await get_channel_layer().group_send(group_name(session.public_id), {"type": kind})
        await database_sync_to_async(move)(session, SessionState.STOPPED, "closed")
        assert await ws.receive_json_from(timeout=5) == {
            "type": "state",
            "state": "stopped",
            "reason": "closed",
        }
        await database_sync_to_async(move)(session, SessionState.DELETED, "deleted")
        assert (await ws.receive_json_from(timeout=5))["state"] == "deleted"
        assert await closed_with(ws) in (None, 1000)
        await ws.disconnect()

    async_to_sync(watch)()


def test_an_open_log_socket_is_closed_when_a_later_exec_grants_the_session_a_secret(
    cast, row, session
):
    set_secret(session.workspace, Actor(cast.alice), "API_KEY", "sekret-value-1")
    _, plain = cast.token(cast.carol, ["run"])
    granted = Actor(cast.carol)  # a member signed in may grant the workspace's secrets
    write(row, ["before"])

    async def watch() -> None:
        ws = await connect(f"/ws/execs/{row.public_id}/logs", secret=plain)
        assert await texts_until(ws, 1) == ["before"]
        # Another exec is granted a secret: this one's output is the session's too, and
        # may carry it (through a file they share). The socket is asked again at once,
        # well before the periodic check (WEBSOCKET_ACCESS_RECHECK_S).
        await database_sync_to_async(exec_in)(session, granted, "true", secret_names=["API_KEY"])
        assert await closed_with(ws) == 4403
        await ws.disconnect()

    async_to_sync(watch)()


def test_an_open_session_run_log_socket_is_closed_at_a_grant_its_viewer_does_not_cover(
    cast, session, settings
):
    """The session's run log is read only by those who cover the session (security 26):
    a grant wakes the run's log sockets (sessions.signals.session_granted), so a viewer
    who does not cover the new name is closed at once, as a new connection would be
    refused (4404), while a viewer who covers it streams on."""
    settings.WEBSOCKET_ACCESS_RECHECK_S = 300  # only the grant's wake-up closes it in time
    set_secret(session.workspace, Actor(cast.alice), "API_KEY", "sekret-value-1")
    run = make_run(
        session.workspace,
        cast.carol,
        purpose=Purpose.SESSION,
        state=RunState.RUNNING,
        workspace_volume=f"berth-test-session-{session.public_id}",
    )
    session.run = run
    session.save(update_fields=["run"])
    _, plain = cast.token(cast.carol, ["run"])
    _, covering = cast.token(cast.carol, ["run"], secret_names=["API_KEY"])
    write_run(run, ["channel ready"], signal=True)

    async def watch() -> None:
        path = f"/ws/runs/{run.public_id}/logs"
        refused = await connect(path, secret=plain)
        kept = await connect(path, secret=covering)
        for ws in (refused, kept):
            assert await texts_until(ws, 1) == ["channel ready"]
        granted = time.monotonic()
        await database_sync_to_async(exec_in)(
            session, Actor(cast.carol), "true", secret_names=["API_KEY"]
        )
        assert await closed_with(refused) == 4404
        assert time.monotonic() - granted < 2
        await refused.disconnect()
        # The covering viewer's socket is open still and gets what comes next.
        await database_sync_to_async(write_run)(run, ["after the grant"], True)
        assert await texts_until(kept, 2) == ["after the grant"]
        await kept.disconnect()

    async_to_sync(watch)()
