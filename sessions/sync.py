"""Source in step with Git, on the doors' side: a write on a branch (a commit from the
editor, the API or MCP, or a git push) reaches every session following that branch
before the write answers (workspaces.signals.branch_moved).

1. Each live session on the branch gets a SessionSync row for the new commit, and its
   runner agent is woken (only the agent enters a sandbox: sessions.applier applies it
   through the exec channel, then signals the session's group).
2. The write's answer waits, up to SESSION_SYNC_WAIT_S, until every ready session has
   applied it; frozen and starting ones apply it before their next exec, so an exec
   started after the answer sees the write either way.
3. The answer reports each session: applied, conflict (the files it had changed too,
   left as it has them), frozen: applied on resume, starting, or pending.
A stopped session gets the branch at its next start (sessions.actions queues it then).
A change to what keys the dependency cache marks the session deps_stale.
"""

import logging
from typing import Any

from django.conf import settings
from django.urls import reverse

from core import fanout
from core.errors import NotFound
from runs.actions import load_config
from runs.models import Run
from sessions.actions import queue_sync
from sessions.lifecycle import group_name
from sessions.models import Session, SessionState, SessionSync, SyncState
from workspaces.config import ConfigError
from workspaces.gitstore import GitStore
from workspaces.models import Workspace
from workspaces.signals import Follower
from workspaces.store import open_store

log = logging.getLogger("berth.sessions")

# A session in these holds a container (or will): it follows its branch now.
FOLLOWING = (SessionState.STARTING, SessionState.READY, SessionState.FREEZING, SessionState.FROZEN)
RECHECK_S = 0.5  # a lost signal costs at most this


def on_branch_moved(
    sender: object, workspace: Workspace, branch: str, sha: str, actor: object, **_: object
) -> list[Follower]:
    sessions = list(
        Session.objects.select_related("run__sandbox", "workspace").filter(
            workspace=workspace, ref=branch, state__in=FOLLOWING
        )
    )
    rows: dict[int, SessionSync] = {}
    for session in sessions:
        rows[session.pk] = queue_sync(session, sha)
        if not session.deps_stale and deps_changed(session.run, sha):
            session.mark_deps_stale()
    ready = [s for s in sessions if s.state == SessionState.READY]
    if ready:
        # Until each ready one has it, or is ready no more (frozen meanwhile: it applies
        # it on resume); the agent's signal, or a move's, wakes the wait.
        fanout.wait(
            [group_name(s.public_id) for s in ready],
            lambda: (
                not SessionSync.objects.filter(
                    pk__in=[rows[s.pk].pk for s in ready],
                    state=SyncState.PENDING,
                    session__state=SessionState.READY,
                ).exists()
            ),
            settings.SESSION_SYNC_WAIT_S,
            RECHECK_S,
        )
    found = SessionSync.objects.select_related("session__workspace__team").in_bulk(
        [r.pk for r in rows.values()]
    )
    return [report(found[rows[s.pk].pk]) for s in sessions]


def report(row: SessionSync) -> Follower:
    """What the write's answer says of one session, as things are now."""
    session = row.session
    sid = session.public_id
    page = reverse(
        "workspace-session", args=[session.workspace.team.slug, session.workspace.slug, sid]
    )
    if row.state == SyncState.APPLIED:
        return Follower("session", sid, "applied", "applied: an exec started now sees it", url=page)
    if row.state == SyncState.CONFLICT:
        paths = [c["path"] for c in row.conflicts]
        return Follower(
            "session",
            sid,
            "conflict",
            f"applied, except {len(paths)} file(s) the session had changed too, left as the "
            f"session has them (nothing overwritten): {', '.join(paths[:10])}. Commit the "
            f"session's version (POST /api/v1/sessions/{sid}/commit refuses overlaps), or "
            "make the session's copy match the branch's.",
            row.conflicts,
            url=page,
        )
    if session.state in (SessionState.FREEZING, SessionState.FROZEN):
        return Follower("session", sid, "frozen", "frozen: applied on resume", url=page)
    if session.state == SessionState.STARTING:
        return Follower(
            "session", sid, "starting", "starting: applied before its first exec", url=page
        )
    return Follower(
        "session",
        sid,
        "pending",
        f"not applied within {settings.SESSION_SYNC_WAIT_S} s (the runner agent is busy or "
        "down): applied before the session's next exec",
        url=page,
    )


def deps_changed(run: Run | None, commit: str) -> bool:
    """Whether what keys the dependency cache of the session's start — the [setup]
    command and its cache_key files — differs at `commit`: its /deps is stale."""
    if run is None:
        return False
    try:
        setup = load_config(run.workspace, commit).setup
    except ConfigError:
        return False  # a broken workspace.toml: the next start says so
    had: dict[str, Any] = run.setup or {}
    if setup.command != had.get("command", "") or list(setup.cache_key) != had.get("cache_key", []):
        return True
    with open_store(run.workspace) as store:
        for path in setup.cache_key:
            if _entry(store, run.commit, path) != _entry(store, commit, path):
                return True
    return False


def _entry(store: GitStore, commit: str, path: str) -> tuple[int, bytes] | None:
    try:
        return store.lookup(commit, path)
    except NotFound:
        return None
