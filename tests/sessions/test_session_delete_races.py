"""A delete asked while a session is stopping is never lost to the stop's end racing it
(sessions.actions.delete_session, sessions.lifecycle): whichever lands first, the
session ends deleted. Seen once in a clean-clone run: the delete landed between the
agent's read of the stop asked and its move, and the session stayed `stopped` with its
files. Rows alone, in the order the race took; the doors' delete of a stopping session
is tests/sessions/test_session_previews.py and tests/sessions/test_session_doors.py."""

import pytest

from accounts.access import Actor
from sessions import lifecycle
from sessions.actions import delete_session
from sessions.models import Session, SessionState
from tests.support.runs import make_run
from tests.support.sessions import session_row
from workspaces.actions import create_workspace

# The deleted session's volume is removed: the engine is asked (it is not there).
pytestmark = pytest.mark.docker


@pytest.fixture
def stopping(cast):
    workspace = create_workspace(cast.team_a, Actor(cast.alice), "Shop", "shop")
    run = make_run(workspace, cast.carol, purpose="session", state="cancelled")
    session = session_row(
        workspace,
        requested_by=cast.carol,
        run=run,
        runner_host="local",
        state=SessionState.STOPPING,
        stop_reason="closed",
        stop_requested_by="carol",
    )
    return session, run


def test_a_delete_landing_between_the_ends_read_and_its_move_deletes_it(stopping, cast):
    session, run = stopping
    read_by_the_agent = Session.objects.get(pk=session.pk)  # stop asked: "closed"
    delete_session(Session.objects.get(pk=session.pk), Actor(cast.carol))
    assert Session.objects.get(pk=session.pk).stop_reason == "deleted"
    # The end decided on what it read misses, and writes nothing...
    assert lifecycle._end(read_by_the_agent, run) is False
    assert Session.objects.get(pk=session.pk).state == SessionState.STOPPING
    # ...and the run's end, which reads again, deletes it.
    lifecycle.on_run_finished(None, run)
    ended = Session.objects.get(pk=session.pk)
    assert (ended.state, ended.reason) == (SessionState.DELETED, "deleted")
    assert ended.deleted_at is not None


def test_a_delete_read_as_stopping_after_the_stop_ended_deletes_it(stopping, cast):
    session, run = stopping
    read_by_the_door = Session.objects.get(pk=session.pk)
    lifecycle.on_run_finished(None, run)  # the end lands first
    assert Session.objects.get(pk=session.pk).state == SessionState.STOPPED
    delete_session(read_by_the_door, Actor(cast.carol))
    ended = Session.objects.get(pk=session.pk)
    assert (ended.state, ended.reason) == (SessionState.DELETED, "deleted")
