"""A session's terminal on the real stack: a shell held inside the sandbox, carried by
the runner agent, shown through daphne's WebSocket; a viewer that goes away gets what it
missed when it comes back, and the transcript keeps it all, masked."""

import pytest
from websockets.exceptions import ConnectionClosed

from core.links import websocket
from sessions.models import Session
from sessions.transcripts import transcript_dir
from tests.support.api import assert_error
from tests.support.secrets import VALUE
from tests.support.servers import wait_for
from tests.support.sessions import SessionAgent
from tests.support.terminals import Screen, open_socket

pytestmark = pytest.mark.docker


def secret_of(agent) -> str:
    return agent.headers["HTTP_AUTHORIZATION"].removeprefix("Bearer ")


def attached(message: dict) -> bool:
    return message["type"] == "attached"


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
def test_a_terminal_runs_a_shell_and_a_viewer_coming_back_gets_what_it_missed(
    agent, berth_server, runtime
):
    session = agent.ready(runtime=runtime)
    r = agent.post(f"/sessions/{session['id']}/terminals")
    assert r.status_code == 201, r.content
    term = r.json()
    assert term["state"] == "open" and term["socket"] == websocket(f"/ws/terminals/{term['id']}")

    with open_socket(berth_server, term["id"], secret_of(agent)) as ws:
        screen = Screen(ws)
        screen.read_until(attached)
        ws.send('{"type": "resize", "cols": 120, "rows": 40}')
        screen.type("echo hi-$((40+2)); stty size; tty\r")
        screen.read_until("120")
        screen.read_until("/dev/pts/")
        assert "hi-42" in screen.text and "40 120" in screen.text
        screen.read_prompt()
        # Something that prints once this viewer has gone. Its echo is not waited for:
        # under load gVisor's line discipline once showed none, though the shell ran the
        # line (later-2 came); the transcript below shows it ran.
        screen.type("sleep 1; echo later-$((1+1))\r")
        seen = screen.end

    transcript = lambda: agent.get(f"/terminals/{term['id']}/transcript").content.decode()  # noqa: E731
    wait_for(lambda: "later-2" in transcript(), 30, what="the transcript to hold later-2")
    assert "hi-42" in transcript()

    with open_socket(berth_server, term["id"], secret_of(agent), after=seen) as ws:
        again = Screen(ws)
        first = again.read_until(attached)
        assert first["after"] == seen
        again.read_until("later-2")
        assert "hi-42" not in again.text, "only what it missed"
        # The same shell: its variables are still there.
        again.type("X=kept; echo $X-$X\r")
        again.read_until("kept-kept")

        r = agent.client.delete(f"/api/v1/terminals/{term['id']}", **agent.headers)
        assert r.status_code == 202, r.content
        ended = again.read_until(lambda m: m["type"] == "ended")
        assert ended["state"] == "closed"
    assert agent.get(f"/terminals/{term['id']}").json()["state"] == "closed"
    assert_error(
        agent.client.delete(f"/api/v1/terminals/{term['id']}", **agent.headers),
        409,
        "terminal_ended",
    )


def test_a_terminal_masks_a_secret_granted_while_it_is_open_and_follows_the_grant(
    client, cast, api_key, berth_server, run_stack
):
    _, granter = cast.token(
        cast.carol, ["workspace:read", "workspace:write", "run"], secret_names=["API_KEY"]
    )
    agent = SessionAgent(client, granter)
    session = agent.ready()
    term = agent.post(f"/sessions/{session['id']}/terminals").json()
    with open_socket(berth_server, term["id"], granter) as ws:
        screen = Screen(ws)
        screen.read_until(attached)
        # Granted now, to an exec, while the terminal is open: what the exec leaves in a
        # file it shares with the shell is masked on the screen and in the transcript.
        agent.exec(session, 'printf "%s\\n" "$API_KEY" > /tmp/shared', secrets=["API_KEY"])
        screen.type("cat /tmp/shared; echo done-$((1+1))\r")
        screen.read_until("done-2")
        assert "***" in screen.text and VALUE not in screen.text
    transcript = lambda: agent.get(f"/terminals/{term['id']}/transcript").content.decode()  # noqa: E731
    wait_for(lambda: "done-2" in transcript(), 30, what="the transcript to catch up")
    assert "***" in transcript() and VALUE not in transcript()

    # Who could not have granted it can neither open nor watch a terminal there.
    _, plain = cast.token(cast.carol, ["workspace:read", "workspace:write", "run"])
    stranger = SessionAgent(client, plain)
    assert_error(
        stranger.post(f"/sessions/{session['id']}/terminals"), 403, "secret_grant_required"
    )
    assert_error(stranger.get(f"/terminals/{term['id']}/transcript"), 403, "secret_grant_required")
    with open_socket(berth_server, term["id"], plain) as ws:
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
        assert closed.value.rcvd.code == 4403
    # Another team: nothing there.
    _, theirs = cast.token(cast.charlie, ["workspace:read", "workspace:write", "run"])
    other = SessionAgent(client, theirs)
    assert other.get(f"/terminals/{term['id']}").status_code == 404
    assert other.post(f"/sessions/{session['id']}/terminals").status_code == 404
    with open_socket(berth_server, term["id"], theirs) as ws:
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
        assert closed.value.rcvd.code == 4404


def test_typing_is_activity_a_frozen_session_resumes_for_it_and_a_stop_ends_it(agent, berth_server):
    session = agent.ready(idle_freeze_s=3)
    term = agent.post(f"/sessions/{session['id']}/terminals").json()
    row = Session.objects.get(public_id=session["id"])
    with open_socket(berth_server, term["id"], secret_of(agent)) as ws:
        screen = Screen(ws)
        screen.read_until(attached)
        before = Session.objects.get(pk=row.pk).last_active_at
        screen.type("echo typed\r")
        screen.read_until("typed")
        wait_for(
            lambda: Session.objects.get(pk=row.pk).last_active_at > before,
            10,
            what="a keystroke to count as activity",
        )
        # Left alone it freezes; a keystroke brings it back, and the shell answers.
        agent.wait_state(session, "frozen", timeout=30)
        screen.type("echo thawed-$((3+3))\r")
        screen.read_until("thawed-6")
        # Said ready once the thaw is written (the shell may answer a moment before).
        agent.wait_state(session, "ready", timeout=10)

        assert agent.post(f"/sessions/{session['id']}/stop").status_code == 202
        ended = screen.read_until(lambda m: m["type"] == "ended", timeout=60)
        assert ended["reason"] == "session_stopped", ended
    closed = agent.get(f"/terminals/{term['id']}").json()
    assert (closed["state"], closed["reason"]) == ("closed", "session_stopped")
    # Its transcript is kept while the session's files are, and goes with them.
    assert "thawed-6" in agent.get(f"/terminals/{term['id']}/transcript").content.decode()
    folder = transcript_dir(row)
    assert folder.exists()
    deleting = agent.client.delete(f"/api/v1/sessions/{session['id']}", **agent.headers)
    assert deleting.status_code in (200, 202), deleting.content
    agent.wait_state(session, "deleted", timeout=60)
    assert not folder.exists()


def test_an_agent_restart_resumes_the_transcript_with_nothing_twice_or_lost(
    agent, berth_server, run_stack
):
    """The recorder sends the transcript to the web host in chunks that say where they
    go (sessions.recorder); a new agent goes on from where the web host's transcript
    is, so what printed before, across and after the restart is in it once each."""
    session = agent.ready()
    term = agent.post(f"/sessions/{session['id']}/terminals").json()
    transcript = lambda: agent.get(f"/terminals/{term['id']}/transcript").content.decode()  # noqa: E731

    def typed(line: str, shows: str) -> None:
        with open_socket(berth_server, term["id"], secret_of(agent)) as ws:
            screen = Screen(ws)
            screen.read_until(attached)
            screen.type(line)
            screen.read_until(shows)

    # Printed while the agent is down too: the shell's replay has it.
    typed("echo before-$((1+1)); sleep 3; echo across-$((2+2))\r", "before-2")
    wait_for(lambda: "before-2" in transcript(), 30, what="the transcript to hold before-2")
    run_stack.agent.kill()
    run_stack.agent.start()
    wait_for(lambda: "across-4" in transcript(), 60, what="the transcript to hold across-4")
    typed("echo after-$((3+3))\r", "after-6")
    wait_for(lambda: "after-6" in transcript(), 30, what="the transcript to hold after-6")
    text = transcript()
    for printed in ("before-2", "across-4", "after-6"):
        assert text.count(printed) == 1, (printed, text)
