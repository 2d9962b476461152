"""Previews of a session: an app an exec started in a session's container (say a
detached `python3 -m http.server 8080`), served by the preview gateway from that
container's network namespace, as a preview's own run is.

Such a preview has no run of its own: its life is the session's.
1. It is asked for on a ready (or frozen: it resumes) session, on a port that is not
   Berth's own in the sandbox (the exec channel's, the egress proxy's); the runner
   agent's watcher probes it until it answers (previews.watch), as any preview.
2. A request through the gateway is activity of the session (throttled: previews.lookups).
3. While the session is freezing or frozen the gateway forwards nothing into it: the
   web process resumes the session for the request, then serves it, or answers
   `session_not_resumed` (sessions.freeze says how the gateways are told first).
4. When the session stops, fails, is lost or deleted, the preview is stopped with
   `session_ended`, saying how the session ended.
"""

from django.db import transaction

from accounts.access import Actor
from accounts.actions import record
from core.errors import Conflict, Invalid
from previews.actions import stop_preview
from previews.models import LIVE_STATES, Preview
from previews.viewers import forget_viewers, visibility_changed
from sandbox.egress.policy import PROXY_PORT
from sessions.actions import require_usable, wake
from sessions.channel import CHANNEL_PORT
from sessions.models import Session, SessionState

# The session's container holds its processes in these: a preview of it can serve.
SERVING_STATES = (SessionState.READY, SessionState.FREEZING, SessionState.FROZEN)
# Berth's own listeners inside every session's namespace: the exec channel (it runs
# commands for whoever reaches it) and the egress proxy. Never a preview's port.
RESERVED_PORTS = {CHANNEL_PORT: "the session's exec channel", PROXY_PORT: "the egress proxy"}


def preview_session(
    session: Session, actor: Actor, port: int, health_path: str | None = None
) -> Preview:
    """A preview of what listens on `port` in the session (the live one already there
    for that port, if any). The session resumes if frozen: asking is activity."""
    require_usable(session)
    if session.state not in SERVING_STATES:
        raise Conflict(
            f"The session is {session.state}; a preview serves an app the session runs, so "
            f"wait until it is ready (GET /api/v1/sessions/{session.public_id}), start the "
            "app with a detached exec, then ask again.",
            {"state": session.state},
            code="session_not_ready",
        )
    if not 1 <= port <= 65535:
        raise Invalid("port is between 1 and 65535.", {"field": "port"}, code="invalid_port")
    if port in RESERVED_PORTS:
        raise Invalid(
            f"Port {port} is {RESERVED_PORTS[port]}, Berth's own inside the sandbox; "
            "start your app on another port (8080, say) and preview that.",
            {"field": "port"},
            code="port_reserved",
        )
    health_path = health_path or "/"
    if not health_path.startswith("/") or any(c in health_path for c in " \r\n\x00"):
        raise Invalid(
            "health_path is a path on the app, starting with /.", {"field": "health_path"}
        )
    with transaction.atomic():
        session = Session.objects.select_for_update().get(pk=session.pk)
        wake(session)
        found = Preview.objects.filter(session=session, port=port, state__in=LIVE_STATES).first()
        if found is not None:
            return found
        sandbox = session.run.sandbox if session.run else None
        preview = Preview.objects.create(
            workspace=session.workspace,
            kind="session",
            session=session,
            ref=session.ref,
            commit=session.base_commit,
            command=f"what listens on port {port} in session {session.public_id}",
            port=port,
            health_path=health_path,
            idle_timeout_s=session.idle_stop_s,
            run=None,
            requested_by=actor.user,
            token=actor.token,
            # Where the gateway connects: the session's container, as the keeper found it.
            sandbox_pid=sandbox.pid if sandbox else None,
            sandbox_netns=sandbox.netns if sandbox else None,
        )
        record(
            session.workspace.team,
            actor,
            "preview.started",
            f"preview:{preview.public_id}",
            session.workspace.slug,
            session=session.public_id,
            port=port,
        )
    return preview


def on_session_granted(sender: object, session: Session, names: list[str], **_: object) -> None:
    """The session holds a secret it did not: what every gateway and web process
    cached about its previews' viewers was decided without it (dropped at once), and
    their open tunnels and state sockets check their viewer again (the moves group)."""
    previews = list(
        Preview.objects.filter(session=session, state__in=LIVE_STATES).values_list(
            "public_id", flat=True
        )
    )
    if previews:
        forget_viewers(previews=previews)
        visibility_changed(previews)


def public_previews(session: Session) -> list[str]:
    """The live public previews of the session (sessions.lifecycle.require_unpublished)."""
    return list(
        Preview.objects.filter(session=session, state__in=LIVE_STATES, public=True).values_list(
            "public_id", flat=True
        )
    )


def served(session: Session) -> bool:
    """Whether a live preview serves from the session (its freeze is then announced)."""
    return Preview.objects.filter(session=session, state__in=LIVE_STATES).exists()


def on_session_moved(sender: object, session: Session, state: str, **_: object) -> None:
    """The session no longer runs its container: its previews stop, saying how it ended."""
    if state in (SessionState.STARTING, *SERVING_STATES):
        return
    for preview in Preview.objects.select_related("workspace__team", "run").filter(
        session=session, state__in=LIVE_STATES
    ):
        stop_preview(
            preview,
            None,
            reason="session_ended",
            session=session.public_id,
            session_state=state,
            session_reason=session.reason or session.stop_reason,
        )


def resume_for_request(session_public_id: str) -> bool:
    """A request to a preview of the session came while it was freezing or frozen: it
    is activity, and the session resumes for it (as for an exec). False when it is no
    longer one that can resume."""
    session = (
        Session.objects.select_related("run__sandbox").filter(public_id=session_public_id).first()
    )
    if session is None or session.state not in SERVING_STATES:
        return False
    wake(session)
    return True
