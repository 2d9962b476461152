"""A session's terminals, as the doors ask for them: open (opening or reusing the
workspace's session from its page), close, and the transcript.

The shell itself is held inside the sandbox by the exec channel (berth_pty.py); the
runner agent of the session's host carries every byte between it and the browser
(sessions/terminal_relay.py) and keeps the transcript, masked, under the data dir
until the session is deleted. Daphne holds nothing but the browser's socket
(sessions/terminal_consumer.py), so a reload or a daphne restart is a new attach that
replays what was missed.
"""

from django.db import transaction

from accounts.access import Actor
from accounts.actions import record
from core import fanout
from core.errors import Conflict
from sessions.actions import host_of, open_session, require_usable, start_again
from sessions.models import (
    LIVE_STATES,
    RESTARTABLE_STATES,
    Session,
    SessionState,
    Terminal,
    TerminalState,
)
from sessions.transcripts import relay_channel
from workspaces.models import Workspace

MAX_OPEN = 8  # per session: berth_pty.MAX_TERMINALS in the image holds the same


def open_terminal(session: Session, actor: Actor) -> Terminal:
    """A new terminal in a session that is or will be running (a frozen one resumes
    for it, a starting one gets it once ready)."""
    actor.require_scope("run")
    require_usable(session)
    with transaction.atomic():
        locked = Session.objects.select_for_update().get(pk=session.pk)
        require_usable(locked)
        live = Terminal.objects.filter(
            session=session, run=locked.run, state=TerminalState.OPEN
        ).count()
        if live >= MAX_OPEN:
            raise Conflict(
                f"The session has {MAX_OPEN} terminals open, its most; close one first "
                f"(DELETE /api/v1/terminals/{{id}}).",
                {"open": live, "maximum": MAX_OPEN},
                code="terminal_limit",
            )
        number = Terminal.objects.filter(session=session).count() + 1
        term = Terminal.objects.create(
            session=session,
            run=locked.run,
            name=f"Terminal {number}",
            opened_by=actor.user,
            token=actor.token,
        )
        session.touch()
        if locked.state in (SessionState.FREEZING, SessionState.FROZEN):
            session.ask_resume()
        record(
            session.workspace.team,
            actor,
            "terminal.opened",
            f"terminal:{term.public_id}",
            session.workspace.slug,
            session=session.public_id,
        )
    return term


def session_for_terminal(workspace: Workspace, actor: Actor, ref: str) -> Session:
    """The session a terminal opened from the workspace page goes into: the branch's
    live session (the newest), else its newest stopped one started again on its files,
    else a new one."""
    sessions = Session.objects.filter(workspace=workspace, ref=ref).order_by("-pk")
    live = sessions.filter(state__in=LIVE_STATES).exclude(state=SessionState.STOPPING).first()
    if live is not None:
        return live
    stopped = sessions.filter(state__in=RESTARTABLE_STATES).first()
    if stopped is not None:
        return start_again(stopped, actor)
    return open_session(workspace, actor, ref)


def close_terminal(term: Terminal, actor: Actor) -> Terminal:
    """Its shell hung up (the agent tells the channel); its transcript stays."""
    actor.require_scope("run")
    if not term.is_open:
        raise Conflict(
            f"The terminal is already {term.state}.", {"state": term.state}, code="terminal_ended"
        )
    with transaction.atomic():
        term.end(TerminalState.CLOSED, "closed")
        host = host_of(term.session)
        public_id = term.public_id
        transaction.on_commit(
            lambda: fanout.channel_send(
                relay_channel(host), {"type": "terminal.close", "terminal": public_id}
            )
        )
    return term
