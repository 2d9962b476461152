"""WebSocket doors onto a session: an exec's log, and the session's state.

`/ws/execs/<id>/logs?after=<seq>` is a run's log door (runs.consumers.LogConsumer) on
the exec's log: the same messages, then `{"type": "end", "state": "ended", reason,
exit_code, message}`. Its access is the exec's (sessions.access.access_exec): another team's
closes 4404, and a session whose execs were granted secrets needs an actor whose
grants cover them (4403), checked again when a later exec grants the session another.

`/ws/sessions/<id>` sends `{"type": "state", state, reason}` at once and again at each
change of the session's state, for its page to refresh itself; at `deleted` (its last)
it closes. The keeper and the lifecycle signal each move to the session's group
(sessions.lifecycle.group_name); a signal is only a wake-up, the row is read again.
"""

from collections.abc import Mapping
from typing import Any

from runs.consumers import LogConsumer, StateConsumer
from sessions.access import access_exec, access_session
from sessions.lifecycle import group_name
from sessions.models import Exec, Session, SessionState


class HearsSession:
    """A consumer in a session's group hears every signal sent there (its state moved,
    a sync applied, a read of its files made): those it has no use for are ignored,
    where Channels would otherwise end the socket for a type without a handler."""

    async def session_synced(self, message: dict[str, Any]) -> None:
        pass

    async def session_snapshot(self, message: dict[str, Any]) -> None:
        pass


class ExecLogConsumer(HearsSession, LogConsumer):
    session_group = ""

    def authorise(self) -> Exec:
        actor = self.scope_actor()
        row = access_exec(actor, self.scope["url_route"]["kwargs"]["exec_id"])
        self.access_of = (row.session.workspace.team_id, actor)
        self.session_id = row.session.public_id
        return row

    async def connect(self) -> None:
        await super().connect()
        if self.group:  # accepted: it also hears its session's changes
            self.session_group = group_name(self.session_id)
            await self.channel_layer.group_add(self.session_group, self.channel_name)

    async def session_changed(self, message: dict[str, Any]) -> None:
        # A later exec granted the session a secret (sessions.actions.exec_in): its
        # outputs now need grants covering it, this one's included, so access is
        # checked again at once rather than at the next periodic check.
        self.access_event.set()

    async def disconnect(self, code: int) -> None:
        if self.session_group:
            await self.channel_layer.group_discard(self.session_group, self.channel_name)
        await super().disconnect(code)

    def reload(self) -> Exec | None:
        fields = ("public_id", "state", "reason", "exit_code", "message")
        return Exec.objects.only(*fields).filter(public_id=self.followed_id).first()


class SessionStateConsumer(HearsSession, StateConsumer):
    final_states = (SessionState.DELETED,)  # its last state

    def authorise(self) -> Session:
        """Its state is for whoever may see the session (as `GET /sessions/{id}`), even
        without grants covering its secrets: a state says nothing of them."""
        actor = self.scope_actor()
        session = access_session(actor, self.scope["url_route"]["kwargs"]["session_id"], use=False)
        self.access_of = (session.workspace.team_id, actor)
        return session

    def group_for(self, public_id: str) -> str:
        return group_name(public_id)

    async def session_changed(self, message: dict[str, Any]) -> None:
        self.wake.set()  # only a wake-up: the state is read from the database

    def state_now(self) -> Mapping[str, Any] | None:
        return Session.objects.filter(public_id=self.followed_id).values("state", "reason").first()
