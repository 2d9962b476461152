"""State changes of sessions asked for through a door: open, start again, exec, kill,
keep alive, stop, delete. The runner agent carries them out (sessions.keeper): it is
the one process that enters a sandbox, and it is told by a signal after commit (and
finds the work by itself within a tick if the signal is lost)."""

from functools import partial

from django.db import transaction
from django.utils import timezone

from accounts.access import Actor
from accounts.actions import record
from accounts.models import Team
from core import fanout
from core.errors import Conflict, Invalid, QuotaExceeded
from runs import secrets
from runs.actions import check_env_names, check_grants, load_config
from runs.models import Purpose
from runs.services import start_service
from sandbox.images import SESSION_INIT
from sessions.access import require_cover
from sessions.lifecycle import (
    agent_group,
    ask_stop,
    changed,
    hand_volume_to_host,
    require_unpublished,
    signal_ended,
)
from sessions.models import (
    LIVE_STATES,
    RESTARTABLE_STATES,
    Exec,
    Session,
    SessionPolicy,
    SessionState,
    SessionSync,
)
from sessions.outcomes import describe_exec, describe_session
from workspaces import contract, reviews
from workspaces.models import ContractReview, Workspace
from workspaces.store import open_store

TIMERS = ("idle_freeze_s", "idle_stop_s", "lifetime_s", "retention_s")
MAX_COMMAND = 100_000


def nudge(host: str) -> None:
    transaction.on_commit(lambda: fanout.group_send(agent_group(host), {"type": "sessions.nudge"}))


def host_of(session: Session) -> str:
    """Where its volume and its agent are: recorded at its first placement, never the
    caller's own host (a nudge sent there would reach the wrong agent)."""
    return session.runner_host


def queue_sync(session: Session, commit: str) -> SessionSync:
    """The session is to be brought to `commit` before its next exec (its agent applies
    it: sessions.applier)."""
    row = SessionSync.objects.create(session=session, commit=commit)
    nudge(host_of(session))
    return row


def _timers(team: Team, asked: dict[str, int | None]) -> dict[str, int]:
    """Each of the four numbers as asked, else the team's maximum; never above it."""
    maxima = SessionPolicy.of(team)
    chosen = {}
    for name in TIMERS:
        value = asked.get(name)
        if value is not None and value > maxima[name]:
            raise Invalid(
                f"{name} is at most {maxima[name]} for team {team.slug}; ask for less, "
                "or ask an admin to raise the team's session maxima.",
                {"field": name, "maximum": maxima[name]},
                code="over_team_maximum",
            )
        chosen[name] = value if value is not None else maxima[name]
    return chosen


def _check_room(team: Team) -> None:
    limit = SessionPolicy.of(team)["max_sessions"]
    live = Session.objects.filter(workspace__team=team, state__in=LIVE_STATES).count()
    if live >= limit:
        raise QuotaExceeded(
            f"Team {team.slug} has {live} live sessions, its limit (frozen ones count: they "
            "hold memory). Stop or delete one, then open this one again.",
            {"limit": limit, "live": live},
            retry_after=30,
            code="session_limit",
        )


def open_session(
    workspace: Workspace,
    actor: Actor,
    ref: str | None = None,
    runtime: str | None = None,
    **timers: int | None,
) -> Session:
    """A new session on a branch: its contract admitted as a run's, then its first
    start queued (its container comes up with the branch head in its own volume)."""
    actor.require_scope("run")
    ref = ref or workspace.default_branch
    with open_store(workspace) as store:
        if store.branch_head(ref) is None:
            raise Invalid(
                f"No branch {ref!r}: a session follows a branch; create it first.",
                {"field": "ref"},
                code="unknown_branch",
            )
    chosen = _timers(workspace.team, timers)
    admitted = _admit(workspace, actor, ref, runtime or "")
    with transaction.atomic():
        Team.objects.select_for_update().filter(pk=workspace.team_id).first()
        _check_room(workspace.team)
        session = Session(
            workspace=workspace,
            ref=ref,
            base_commit="",
            runtime=runtime or "",
            requested_by=actor.user,
            token=actor.token,
            **chosen,
        )
        _start(session, actor, admitted)
        record(
            workspace.team,
            actor,
            "session.opened",
            f"session:{session.public_id}",
            workspace.slug,
            ref=ref,
            commit=session.base_commit,
        )
    return session


def _admit(
    workspace: Workspace, actor: Actor, ref: str, runtime: str
) -> tuple[str, ContractReview | None]:
    """Its branch head and the contract review it runs under, or the typed refusal.
    Called before the caller's transaction: a review opened by a refusal must outlive
    it, or the refusal would name a review nobody can find, let alone approve."""
    with open_store(workspace) as store:
        commit = store.resolve(ref)
    config = load_config(workspace, commit)
    review = reviews.admit(
        workspace,
        actor,
        contract.asked(config, runtime or None, None),
        commit=commit,
        ref=ref,
        asked_for="a session" + (f" with runtime={runtime}" if runtime else ""),
    )
    return commit, review


def _start(session: Session, actor: Actor, admitted: tuple[str, ContractReview | None]) -> None:
    """Its admitted commit (`_admit`), and a run of purpose "session" queued."""
    workspace = session.workspace
    commit, review = admitted
    now = timezone.now()
    if session.pk is None:
        session.base_commit = commit
        session.started_at = session.last_active_at = now
        session.save()
    run = start_service(
        workspace,
        actor,
        commit,
        session.ref,
        # exec: the channel itself is the container's process under its init, so a stop's
        # SIGTERM reaches it (a shell in between would die of it and orphan the channel).
        f"exec {SESSION_INIT}",
        Purpose.SESSION,
        contract_review=review,
        runtime=session.runtime or None,
        workspace_volume=session.volume,
        host=session.runner_host,
    )
    # Its first start places its volume: every later one goes to the same host.
    Session.objects.filter(pk=session.pk).update(
        run=run, starts=session.starts + 1, runner_host=run.runner_host
    )
    session.refresh_from_db()
    if commit != session.base_commit:
        # Started again on its volume: the branch's head reaches its files once it is
        # ready, before its first exec, as a write on the branch would.
        queue_sync(session, commit)
    changed(session)


def start_again(session: Session, actor: Actor) -> Session:
    """A stopped (failed, lost) session back on its volume: its files as it left them."""
    actor.require_scope("run")
    if session.state not in RESTARTABLE_STATES:
        raise Conflict(
            f"The session is {session.state}; only a stopped, failed or lost session starts "
            "again." + (" It was deleted: open a new one." if session.is_deleted else ""),
            {"state": session.state},
            code="session_deleted" if session.is_deleted else "session_not_stopped",
        )
    admitted = _admit(session.workspace, actor, session.ref, session.runtime)
    with transaction.atomic():
        Team.objects.select_for_update().filter(pk=session.workspace.team_id).first()
        _check_room(session.workspace.team)
        now = timezone.now()
        if not session.move(
            SessionState.STARTING,
            RESTARTABLE_STATES,
            reason="",
            message="",
            stop_reason="",
            stop_requested_by="",
            started_at=now,
            ready_at=None,
            frozen_at=None,
            stopped_at=None,
            last_active_at=now,
            deps_stale=False,  # a start mounts the cache of its own key again
        ):
            raise Conflict("The session changed meanwhile; look at it again.", code="conflict")
        _start(session, actor, admitted)
        record(
            session.workspace.team,
            actor,
            "session.started",
            f"session:{session.public_id}",
            session.workspace.slug,
        )
    return session


def require_usable(session: Session) -> None:
    """What an exec, a keep-alive or a terminal needs: a session that is or will be
    running; the refusal says what to call instead."""
    if session.state == SessionState.DELETED:
        raise Conflict(
            "The session was deleted, with its uncommitted files; open a new one "
            "(POST /api/v1/workspaces/{ws}/sessions, or open_session).",
            {"state": session.state},
            code="session_deleted",
        )
    if session.state in RESTARTABLE_STATES or session.state == SessionState.STOPPING:
        raise Conflict(
            f"The session is {session.state} ({session.reason or 'stopping'}); start it again "
            f"(POST /api/v1/sessions/{session.public_id}/start, or open_session with "
            f"session={session.public_id}), then exec.",
            {"state": session.state, "reason": session.reason},
            code="session_stopped",
        )


def exec_in(
    session: Session,
    actor: Actor,
    command: str,
    *,
    timeout_s: int | None = None,
    detach: bool = False,
    env: dict[str, str] | None = None,
    secret_names: list[str] | None = None,
    cwd: str = "/workspace",
) -> Exec:
    """Record an exec and hand it to the session's agent. A frozen session resumes for
    it; a starting one runs it once ready. Secrets go in this exec's environment only."""
    actor.require_scope("run")
    require_usable(session)
    command = command.strip()
    if not command:
        raise Invalid("Give a command to run.", {"field": "command"})
    if len(command) > MAX_COMMAND:
        raise Invalid(
            f"The command is longer than {MAX_COMMAND} characters; put it in a script in the "
            "workspace and run that.",
            {"field": "command", "maximum": MAX_COMMAND},
            code="command_too_long",
        )
    if not cwd.startswith("/") or "\x00" in cwd or len(cwd) > 500:
        raise Invalid("cwd is an absolute path inside the sandbox.", {"field": "cwd"})
    maximum = int((session.run.limits if session.run else {}).get("timeout_s") or 600)
    if timeout_s is not None and not 1 <= timeout_s <= maximum:
        raise Invalid(
            f"timeout_s is between 1 and {maximum} (the session's [sandbox] timeout_s).",
            {"field": "timeout_s", "maximum": maximum},
        )
    env = env or {}
    check_env_names(env)
    names = check_grants(session.workspace, actor, secret_names or [], env)
    row = Exec(
        session=session,
        command=command,
        cwd=cwd,
        timeout_s=timeout_s or maximum,
        detach=detach,
        env_names=sorted(env),
        secret_names=names,
        # Sealed for the session's host, which alone opens them (runs.secrets).
        env_sealed=secrets.seal_for(host_of(session), env),
        secrets_sealed=secrets.seal_for(
            host_of(session), secrets.values_for(session.workspace_id, names)
        ),
        requested_by=actor.user,
        token=actor.token,
    )
    with transaction.atomic():
        # Checked again under the row's lock: a stop that landed since the check above
        # waits for this exec's row, and so ends it (lifecycle.end_execs).
        locked = Session.objects.select_for_update().get(pk=session.pk)
        require_usable(locked)
        if set(names) - set(locked.secret_names):
            # Under the same lock as making a preview of it public (previews.viewers).
            require_unpublished(locked)
        if names and session.grant(names):
            changed(session)  # open log sockets check their access again
        row.save()
        session.touch()
        nudge(host_of(session))
    return row


def kill_exec(row: Exec, actor: Actor, force: bool = False) -> Exec:
    actor.require_scope("run")
    if not row.is_active:
        raise Conflict(f"The exec already ended ({row.reason}).", {"reason": row.reason})
    # Not handed to the channel yet: it ends here and never starts (the agent's start
    # is conditional on it still being queued).
    if row.end_unstarted("killed", describe_exec("killed")):
        signal_ended(row)
        return row
    row.ask_kill(force)
    nudge(host_of(row.session))
    return row


def wake(session: Session) -> None:
    """Activity now: its idle clock starts again, and a freezing or frozen session
    resumes (its agent unpauses it, as for an exec). A freeze still being announced is
    called off instead (sessions.freeze)."""
    session.touch()
    if session.state in (SessionState.FREEZING, SessionState.FROZEN):
        session.ask_resume()
        nudge(host_of(session))


def keep_alive(session: Session, actor: Actor) -> Session:
    """Activity now: its idle clock starts again, and a frozen session resumes."""
    require_usable(session)
    wake(session)
    return session


def stop_session(session: Session, actor: Actor, reason: str = "closed") -> Session:
    """Stop its container: its files stay on its volume (until deleted), everything
    else in the container goes. A frozen one is thawed first (by the agent)."""
    with transaction.atomic():
        _still_covered(session, actor)
        ask_stop(session, reason, actor.label)
    session.refresh_from_db()
    return session


def _still_covered(session: Session, actor: Actor) -> None:
    """The door checked the actor's cover before this request's transaction: checked
    again under the row's lock, which a grant takes too (exec_in), so a grant made in
    between is seen."""
    require_cover(actor, Session.objects.select_for_update().get(pk=session.pk))


def delete_session(session: Session, actor: Actor) -> Session:
    """Its uncommitted files go with its volume; a live one is stopped first, and goes
    once its container has. Each pass acts on its state as read under the row's lock;
    one that moved meanwhile (its stop ended, someone else stopped it) is looked at
    again, so a delete is never lost to a move it raced (sessions.lifecycle._end)."""
    for _ in range(3):
        with transaction.atomic():
            locked = Session.objects.select_for_update().get(pk=session.pk)
            require_cover(actor, locked)
            if locked.state == SessionState.DELETED:
                break
            if locked.state == SessionState.STOPPING:
                # Its end (on the agent) reads this and deletes it then.
                if Session.objects.filter(pk=session.pk, state=SessionState.STOPPING).update(
                    stop_reason="deleted"
                ):
                    break
                continue
            if locked.state in LIVE_STATES:
                # As read under the lock: its run now (a start again may have replaced
                # the one the door read).
                if ask_stop(locked, "deleted", actor.label):
                    break
                continue
            if session.move(
                SessionState.DELETED,
                RESTARTABLE_STATES,
                reason="deleted",
                message=describe_session("deleted", who=actor.label),
                deleted_at=timezone.now(),
            ):
                transaction.on_commit(partial(hand_volume_to_host, session))
                record(
                    session.workspace.team,
                    actor,
                    "session.deleted",
                    f"session:{session.public_id}",
                    session.workspace.slug,
                )
                changed(session)
                break
    session.refresh_from_db()
    return session
