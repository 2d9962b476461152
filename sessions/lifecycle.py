"""A session's moves that follow from its run and its clocks: its start's run ending,
its files going (its volume, its reads' stores). Called from the run's end (any
process) and the runner agent."""

import logging
from collections.abc import Callable

import docker.errors
from django.db import transaction
from django.dispatch import Signal
from django.utils import timezone

from accounts.actions import record
from core import fanout
from core.errors import Conflict
from logs import logstore
from runs import lapses
from runs.models import OWNER, Purpose, Run, RunState
from runs.services import stop_service
from sandbox.engine import engine
from sandbox.models import Sandbox
from sessions import snapstore
from sessions.models import (
    LIVE_STATES,
    RESTARTABLE_STATES,
    Exec,
    ExecState,
    Session,
    SessionState,
    Terminal,
    TerminalState,
)
from sessions.outcomes import describe_exec, describe_session
from sessions.transcripts import remove_transcripts
from workspaces.models import Workspace

log = logging.getLogger("berth.sessions")


def agent_group(host: str) -> str:
    """The runner agent of `host` listens here for "there is work" (it also looks by
    itself every tick: a signal only saves waiting for it)."""
    return f"sessions_agent_{host}"


def group_name(session_public_id: str) -> str:
    """Watchers of a session's state (its page, a waiting API call)."""
    return f"session_{session_public_id}"


# Sent after the commit of each move of a session (kwargs: session, state): what
# serves from its container (previews.of_sessions) follows it from here.
session_moved = Signal()
# The preview gateways listen here: a session about to be paused is announced first
# (sessions.freeze), so they stop sending requests into it.
GATEWAYS_GROUP = "session_gateways"
# Whether something serves requests from a session's container (registered by the apps
# above: previews). Its freeze is then announced to the gateways before the pause.
Served = Callable[[Session], bool]
_served: list[Served] = []


def register_served(served: Served) -> None:
    _served[:] = [served]


def is_served(session: Session) -> bool:
    return any(served(session) for served in _served)


# The public previews serving from a session's container (registered by previews): a
# session with one takes no secret grant, since anyone with its address sees what it
# runs.
Published = Callable[[Session], list[str]]
_published: list[Published] = []


def register_published(published: Published) -> None:
    _published[:] = [published]


def require_unpublished(session: Session) -> None:
    """409 `session_preview_public` while a public preview serves from the session."""
    public = [p for published in _published for p in published(session)]
    if public:
        raise Conflict(
            f"Preview {public[0]} of this session is public: anyone with its address sees "
            "what the session runs, and a secret granted here could be read there. Make it "
            f"private first (POST /api/v1/previews/{public[0]}/public with "
            '{"public": false}), then run the exec again.',
            {"previews": public},
            code="session_preview_public",
        )


def changed(session: Session) -> None:
    def send() -> None:
        state, group = session.state, group_name(session.public_id)
        fanout.group_send(group, {"type": "session.changed", "state": state})
        for receiver, result in session_moved.send_robust(Session, session=session, state=state):
            if isinstance(result, Exception):
                log.error("%s failed after session %s moved: %r", receiver, group, result)

    transaction.on_commit(send)


def signal_ended(row: Exec, seq: int = 0) -> None:
    """Tell an exec's watchers its end is written (its log's group, as a run's)."""
    fanout.group_send(
        logstore.group_name(row.public_id), {"type": "log.signal", "seq": seq, "ended": True}
    )


def end_execs(session: Session, why: str, oom: bool = False) -> None:
    """Every exec of the session without an end: the session's stop ended it (with
    `oom`, the container ran out of memory: under gVisor the limit is the whole
    sandbox's, so an exec past it takes the session with it)."""
    for row in Exec.objects.filter(
        session=session, state__in=(ExecState.QUEUED, ExecState.RUNNING)
    ):
        reason = "session_stopped" if row.state == ExecState.RUNNING else "not_started"
        if oom and row.state == ExecState.RUNNING:
            reason = "oom_killed"
        if row.finish(reason, describe_exec(reason, why=why, detail=why)):
            signal_ended(row)


def on_run_finished(sender: object, run: Run, **_: object) -> None:
    """Its start's run ended: the session stops, fails or is lost, typed; a session
    asked to be deleted loses its volume now."""
    if run.purpose != Purpose.SESSION:
        return
    session = Session.objects.select_related("workspace__team").filter(run=run).first()
    if session is None or session.state not in LIVE_STATES:
        return
    # The engine's word on memory, whatever stop was asked meanwhile (the run's reason
    # is the first stop asked; a stop asked as gVisor's sandbox ran out of memory
    # would otherwise say "session_stopped" of the exec that took it).
    oom = (
        run.reason == "oom"
        or Sandbox.objects.filter(
            owner_kind=OWNER, owner_id=run.public_id, oom_killed=True
        ).exists()
    )
    end_execs(session, session.stop_reason or run.reason, oom=oom)
    # Their shells were processes of that container: gone with it.
    for term in Terminal.objects.filter(session=session, run=run, state=TerminalState.OPEN):
        term.end(TerminalState.CLOSED, "session_stopped")
    # The move is conditional on the stop asked as it was read: a delete asked while
    # it was stopping (delete_session) that lands between the read and the move makes
    # the move miss, and the end is decided again with it, never lost.
    for _attempt in range(3):
        if _end(session, run):
            return
        session.refresh_from_db()
        if session.state not in LIVE_STATES:
            return


def _end(session: Session, run: Run) -> bool:
    """The one end of a session whose run ended, by the stop asked of it as read now;
    False if that stop changed before the move (then nothing was written)."""
    now = timezone.now()
    facts = {
        "who": session.stop_requested_by or "a user",
        "idle_stop_s": session.idle_stop_s,
        "lifetime_s": session.lifetime_s,
        "deadline_s": 0,
        "run_reason": run.reason,
        "run_message": run.message,
    }
    if session.stop_reason == "deleted":
        # Its volume goes once the row says deleted (below): its container is removed
        # only after this end, so the agent's sweep takes the volume if it is still held.
        to, reason = SessionState.DELETED, "deleted"
    elif session.stop_reason in LOST_STOPS:
        to, reason = SessionState.LOST, session.stop_reason
    elif session.stop_reason:
        to, reason = SessionState.STOPPED, session.stop_reason
    elif session.state == SessionState.STARTING:
        to, reason = SessionState.FAILED, "start_failed"
    elif run.state == RunState.LOST or run.reason == "exit_zero":
        # The channel exits 0 only when told to stop, and no stop was asked: something
        # outside stopped the container (the engine's restart, a `docker stop`).
        to, reason = SessionState.LOST, "lost"
    else:
        to, reason = SessionState.FAILED, "process_ended"
    if not session.move_if(
        to,
        LIVE_STATES,
        {"stop_reason": session.stop_reason},
        reason=reason,
        message=describe_session(reason, **facts),
        stopped_at=now,
        **({"deleted_at": now} if to == SessionState.DELETED else {}),
    ):
        return False
    record(
        session.workspace.team,
        None,
        f"session.{to}",
        f"session:{session.public_id}",
        session.workspace.slug,
        reason=reason,
    )
    changed(session)
    if to == SessionState.DELETED:
        remove_volume(session)
    return True


# Stops Berth makes because the session cannot be trusted any more: it ends `lost`.
LOST_STOPS = ("channel_unproven",)


def lose_unproven(sandbox_id: str) -> bool:
    """Its exec channel could not prove the key it was handed (sessions.channel): a
    channel restarted without it, or something else on its port. It is never keyed
    again; the session is stopped and ends `lost` (docs/security.md, 32)."""
    session = (
        Session.objects.select_related("workspace__team", "run")
        .filter(run__sandbox__public_id=sandbox_id, state__in=LIVE_STATES)
        .first()
    )
    if session is None:
        return False
    log.warning("session %s: its exec channel cannot prove its key", session.public_id)
    return ask_stop(session, "channel_unproven", "Berth")


def ask_stop(session: Session, reason: str, who: str) -> bool:
    """Stop its container (a frozen one is thawed first by the engine loop): its files
    stay on its volume, everything else in the container goes."""
    with transaction.atomic():
        if not session.move(
            SessionState.STOPPING,
            tuple(s for s in LIVE_STATES if s != SessionState.STOPPING),
            stop_reason=reason,
            stop_requested_by=who,
        ):
            return False
        if session.run is not None:
            stop_service(session.run, "session_stopped", who)
        record(
            session.workspace.team,
            None,
            "session.stopping",
            f"session:{session.public_id}",
            session.workspace.slug,
            reason=reason,
            by=who,
        )
        changed(session)
    return True


def hand_volume_to_host(session: Session) -> None:
    """A session deleted at a door: its terminals' transcripts and its reads' scratch
    stores go now; its /workspace volume is on its host's engine, which only that
    host's agent touches: told now, it removes it at once (its sweep would within
    SWEEP_EVERY_S in any case)."""
    remove_transcripts(session)
    snapstore.remove_session(session.public_id)
    if session.runner_host:
        fanout.group_send(
            agent_group(session.runner_host), {"type": "sessions.nudge", "sweep": True}
        )


def remove_volume(session: Session) -> None:
    """On its host (its agent, its worker): its /workspace volume, with every
    uncommitted file in it (gone already is fine), its terminals' transcripts and its
    reads' scratch stores. A volume its last container still holds (removed just after
    its run's end), or a store a door is reading, is left to the runner agent's sweeps
    (sessions.keeper); transcripts kept on another web host, to its sweep
    (sessions.tasks)."""
    remove_transcripts(session)
    snapstore.remove_session(session.public_id)
    try:
        engine().api.remove_volume(session.volume, force=True)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as e:
        log.info("session %s: its volume goes with the next sweep (%s)", session.public_id, e)


def expire(session: Session) -> bool:
    """A stopped session past its retention: its files go."""
    if session.state not in RESTARTABLE_STATES:
        return False
    # The row first: a start asked meanwhile wins, and its volume is never removed.
    done = session.move(
        SessionState.DELETED,
        RESTARTABLE_STATES,
        reason="retention",
        message=describe_session("retention", retention_s=session.retention_s),
        deleted_at=timezone.now(),
    )
    if done:
        remove_volume(session)
        changed(session)
    return done


def on_contract_lapsed(
    sender: object, workspace: Workspace, review_ids: list[int], who: str, **_: object
) -> None:
    """A session under an approval that lapsed, and not admitted by today's approvals,
    stops (runs.lapses says why not kept): its files stay on its volume."""
    for run in lapses.unadmitted(workspace, review_ids, (Purpose.SESSION,)):
        session = Session.objects.select_related("workspace__team").filter(run=run).first()
        if session is not None:
            ask_stop(session, lapses.REASON, who)
