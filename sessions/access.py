"""Who may see and use a session and its execs: one helper each, every door calls it."""

from django.db.models import Q

from accounts.access import Actor, sees_workspace
from core.errors import Forbidden, NotFound
from runs.access import outputs_access_changed
from runs.models import ACTIVE_STATES, Run
from sessions.models import Exec, Session, Terminal


def covers(actor: Actor, session: Session) -> bool:
    """Whether the actor could have granted every secret the session's execs got: a
    signed-in member (who may grant any secret of the workspace), or a token whose
    secret list holds them all. A secret in one exec's environment can end up anywhere
    in the session (a file, a process, another exec's output), so the whole session's
    use follows the grant, as a run's outputs do."""
    if actor.token is None or not session.secret_names:
        return True
    return set(session.secret_names) <= set(actor.token.secret_names or [])


def covers_run(actor: Actor, run: Run) -> bool:
    """A session's run (any of its starts: its volume names the session) is the
    session's output: its log holds what the channel and [setup] wrote there, so it is
    read only by actors who cover the session (runs.access.OUTPUT_CHECKS)."""
    session = Session.objects.filter(
        Q(run=run) | Q(public_id=run.workspace_volume.rpartition("-session-")[2])
    ).first()
    return session is None or covers(actor, session)


def on_session_granted(sender: object, session: Session, names: list[str], **_: object) -> None:
    """The session holds a secret it did not: who may read its run (`covers_run`) has
    narrowed, so the open log sockets of its current run, and of any start of it still
    live, check their access again now (sessions.signals.session_granted)."""
    runs = Run.objects.filter(
        Q(pk=session.run_id)
        | Q(workspace_volume__endswith=f"-session-{session.public_id}", state__in=ACTIVE_STATES)
    ).values_list("public_id", flat=True)
    for public_id in runs:
        outputs_access_changed(public_id)


def access_session(actor: Actor, public_id: str, scope: str = "run", use: bool = True) -> Session:
    """A session of the actor's team (anything else is 404). With `use` (exec, output,
    its files, commit, terminal, keep-alive, start, stop, delete: anything but reading
    its state), a session whose execs were granted secrets needs an actor whose grants
    cover them: 403 `secret_grant_required` otherwise. A stop or a delete is a use: it
    ends the work, or takes the uncommitted files, of those who may use it."""
    session = (
        Session.objects.select_related("workspace__team", "run__sandbox", "requested_by", "token")
        .filter(public_id=public_id)
        .first()
    )
    if session is None or not sees_workspace(
        actor, session.workspace.team_id, session.workspace.slug
    ):
        raise NotFound("No such session.")
    actor.require_scope(scope)
    if use:
        require_cover(actor, session)
    return session


def require_cover(actor: Actor, session: Session) -> None:
    """403 `secret_grant_required` unless the actor covers the session's grants: the
    answer of every door that uses the session (its execs, terminals, previews)."""
    if not covers(actor, session):
        raise Forbidden(
            "Execs in this session were granted secrets "
            f"({', '.join(session.secret_names)}), so using it (exec, output, files, "
            "commit, terminal, stop, delete, its previews) needs a token whose secret list "
            "includes them; ask an admin for one.",
            {"secrets": session.secret_names, "session": session.public_id},
            code="secret_grant_required",
        )


def access_exec(actor: Actor, public_id: str) -> Exec:
    row = (
        Exec.objects.select_related(
            "session__workspace__team", "session__run__sandbox", "requested_by", "token"
        )
        .filter(public_id=public_id)
        .first()
    )
    if row is None:
        raise NotFound("No such exec.")
    access_session(actor, row.session.public_id)
    return row


def access_terminal(actor: Actor, public_id: str, use: bool = True) -> Terminal:
    """A terminal of a session the actor may use (its output is the session's output):
    404 for anything else, 403 `secret_grant_required` as for the session."""
    term = (
        Terminal.objects.select_related("session__workspace__team", "session__run__sandbox")
        .filter(public_id=public_id)
        .first()
    )
    if term is None:
        raise NotFound("No such terminal.")
    access_session(actor, term.session.public_id, use=use)
    return term
