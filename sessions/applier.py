"""Source in step with Git, on the runner agent's side: a session's files brought from
the commit they were last brought to (its base) to the commit of each pending
SessionSync, in order, through the exec channel's `apply` (a compare-and-swap per file,
as the sandbox user: sandbox/in_image/berth_files.py). Called by the keeper under the
session's lock, while the session is ready: before it hands it an exec, when it thaws
it, and when it first answers after a start.

1. The files come from the web host's internal API, batch by batch (sessions.syncplan
   reads them from Git there; this host holds no workspace's store).
2. Each batch goes to the channel as one request.
3. The session records the commit as its base, and each file left in conflict with the
   base its own version had (Session.record_sync); the row gets its result, and the
   session's group a signal (the write's answer waits on it: sessions.sync).
"""

import logging
from typing import Any

from core import fanout
from sandbox import webapi
from sandbox.loop import db, on_thread
from sessions.channel import ChannelError, ask, channel_of
from sessions.lifecycle import group_name
from sessions.models import Session, SessionSync, SyncState

log = logging.getLogger("berth.runner_agent")

APPLY_TIMEOUT_S = 60.0


def pending(session: Session) -> list[SessionSync]:
    return list(SessionSync.objects.filter(session=session, state=SyncState.PENDING))


def has_pending(session: Session) -> bool:
    return SessionSync.objects.filter(session=session, state=SyncState.PENDING).exists()


async def apply_pending(session: Session) -> None:
    """Every pending sync of the session, in order; a channel or a web host that does
    not answer leaves them pending (the keeper tries again, and before the next exec)."""
    for row in await db(pending)(session):
        await _apply(session, row)


def _batch(session: Session, row: SessionSync, at: int) -> dict[str, Any]:
    """The batch of `row` from item `at` (sessions.host_api.sync_batch)."""
    try:
        answer = webapi.client().get(f"/sessions/{session.public_id}/syncs/{row.pk}?at={at}")
    except webapi.WebUnavailable as e:
        raise ChannelError(f"the web host did not send the files: {e}") from None
    assert isinstance(answer, dict)
    return answer


async def _apply(session: Session, row: SessionSync) -> None:
    assert session.run is not None and session.run.sandbox is not None
    base = await db(
        lambda: Session.objects.values_list("base_commit", flat=True).get(pk=session.pk)
    )()
    ns = await on_thread(channel_of)(session.run.sandbox)
    applied: list[str] = []
    conflicts: list[dict[str, str]] = []
    bases: dict[str, dict[str, Any] | None] = {}
    at, total = 0, None
    while total is None or at < total:
        try:
            batch = await on_thread(_batch)(session, row, at)
        except webapi.WebRefused as e:
            if e.code != "commit_unreadable":
                raise ChannelError(str(e)) from None
            # A commit gone from the store: nothing can be applied.
            log.warning("session %s: sync to %s not planned: %s", session.public_id, row.commit, e)
            failed = [{"path": "*", "why": f"nothing applied: {e.message}"}]
            await db(_finish)(session, row, base, 0, failed, {}, [])
            return
        at, total = int(batch["next"]), int(batch["total"])
        batch_bases = batch["bases"]
        refused = [{"path": str(c["path"]), "why": str(c["why"])} for c in batch["refused"]]
        if batch["files"]:
            answer = await ask(
                ns, {"op": "apply", "files": batch["files"]}, timeout=APPLY_TIMEOUT_S
            )
            if not answer.get("ok"):
                raise ChannelError(f"the exec channel refused the files ({answer.get('error')})")
            applied.extend(str(p) for p in answer.get("applied") or [])
            refused += [
                {"path": str(c.get("path")), "why": str(c.get("why"))}
                for c in answer.get("conflicts") or []
            ]
        for conflict in refused:
            if conflict["path"] in batch_bases:
                bases[conflict["path"]] = batch_bases[conflict["path"]]
        conflicts.extend(refused)
    await db(_finish)(session, row, row.commit, len(applied), conflicts, bases, applied)


def _finish(
    session: Session,
    row: SessionSync,
    commit: str,
    applied: int,
    conflicts: list[dict[str, str]],
    bases: dict[str, dict[str, Any] | None],
    settled: list[str],
) -> None:
    session.record_sync(commit, bases, settled)
    if row.finish(applied, conflicts):
        fanout.group_send(group_name(session.public_id), {"type": "session.synced"})
