"""A session's terminal on the real stack: a shell held inside the sandbox, carried by
the runner agent, shown through daphne's WebSocket; a viewer that goes away gets what it
missed when it comes back, and the transcript keeps it all, masked."""

import pytest

from tests.support.api import assert_error
from tests.support.servers import wait_for
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
    assert term["state"] == "open" and term["socket"] == f"/ws/terminals/{term['id']}"

    with open_socket(berth_server, term["id"], secret_of(agent)) as ws:
        screen = Screen(ws)
        screen.read_until(attached)
        ws.send('{"type": "resize", "cols": 120, "rows": 40}')
        screen.type("echo hi-$((40+2)); stty size; tty\r")
        screen.read_until("120")
        screen.read_until("/dev/pts/")
        assert "hi-42" in screen.text and "40 120" in screen.text
        # Something that prints once this viewer has gone.
        screen.type("sleep 1; echo later-$((1+1))\r")
        screen.read_until("sleep 1")
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
