"""The editor's view of a session on its branch: which files the session's copy has
changed (its marks), the files a write on the branch left as the session had them
(its sync conflicts), and one file as the session has it, read-only.

Only the runner agent reads a session's files (sessions.snapshot): these doors ask for a
read and wait for it, as the API's changes door does, but a look is not activity (it
never keeps a session from freezing) and only a ready session is read (a frozen one is
not thawed for a look: its page says so).
"""

import difflib
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET
from dulwich.objects import Tree

from accounts.models import Membership
from core import fanout
from core.errors import BerthError, Conflict
from runs.outputs import flatten
from sessions import changes, snapstore
from sessions.lifecycle import group_name
from sessions.models import LIVE_STATES, Session, SessionState, Snapshot, SnapshotState
from sessions.views import page_context, session_of, session_urls
from workspaces import history
from workspaces.gitstore import MODE_EXEC, MODE_FILE, MODE_TREE, GitStore
from workspaces.history_views import diff_lines
from workspaces.models import Workspace
from workspaces.paths import clean_path
from workspaces.views import page_url, workspace_page

RECHECK_S = 1.0  # a lost signal costs at most this
# A page's look waits less than the API's read (SESSION_READ_WAIT_S): it holds a request
# thread, and an agent that is busy or down is said (503) rather than waited out.
LOOK_WAIT_S = 15
MAX_LISTED = 500  # changed paths a page is told of


def _read_now(session: Session) -> Snapshot:
    """A read of the session's files, waited for (typed when it was not made)."""
    if session.state != SessionState.READY:
        raise Conflict(
            f"The session is {session.state}: its files are read while it is ready "
            "(a command or Keep alive on its page resumes it).",
            {"state": session.state},
            code="session_not_ready",
        )
    row = changes.ask_read(session, activity=False)
    seconds = min(LOOK_WAIT_S, settings.SESSION_READ_WAIT_S)
    fanout.wait(
        [group_name(session.public_id)],
        Snapshot.objects.filter(
            Q(pk=row.pk) & (~Q(state=SnapshotState.PENDING) | ~Q(session__state__in=LIVE_STATES))
        ).exists,
        seconds,
        RECHECK_S,
    )
    if Snapshot.objects.filter(
        pk=row.pk, state=SnapshotState.PENDING, session__state=SessionState.READY
    ).exists():
        raise BerthError(
            f"The session's files were not read within {seconds} s (its runner agent is "
            "busy or down); reload to try again.",
            code="session_not_read",
            status=503,
        )
    return changes.read_result(row.pk)


def _with_read[T](session: Session, use: Callable[[Snapshot, GitStore], T]) -> T:
    """`use` on a read made now, in its scratch store (sessions.snapstore: it sees the
    workspace's objects too). A newer read done in between may have taken that store:
    asked once more then, as the API's doors do (sessions.waiting.with_read)."""
    try:
        row = _read_now(session)
        with snapstore.opened(row.scratch) as store:
            return use(row, store)
    except snapstore.ReadGone:
        row = _read_now(session)
        with snapstore.opened(row.scratch) as store:
            return use(row, store)


@require_GET
@workspace_page
def session_marks(
    request: HttpRequest, membership: Membership, workspace: Workspace, session_id: str
) -> HttpResponse:
    """JSON: the paths whose session copy differs from the commit its files were last
    brought to ({path: added | modified | deleted}), and its sync conflicts."""
    session = session_of(membership, workspace, session_id, use=True)
    answer: dict[str, Any] = {
        "session": session.public_id,
        "state": session.state,
        "conflicts": sorted(session.sync_conflicts or {}),
    }

    def trees(row: Snapshot, store: GitStore) -> tuple[Snapshot, dict, dict]:
        return (
            row,
            flatten(store, store.commit(row.base_commit).tree),
            flatten(store, row.tree.encode()),
        )

    try:
        row, base, ours = _with_read(session, trees)
    except BerthError as e:
        return JsonResponse({**answer, **e.as_dict()}, status=e.status)
    # Paths only, unmasked: a signed-in member may grant any of the workspace's secrets
    # (sessions.access.covers), and a file holding one was read as its base version.
    differ = sorted(p for p in set(base) | set(ours) if base.get(p) != ours.get(p))
    answer.update(
        base_commit=row.base_commit,
        changed={
            p: "added" if p not in base else "deleted" if p not in ours else "modified"
            for p in differ[:MAX_LISTED]
        },
        truncated=len(differ) > MAX_LISTED,
        copy_url=session_urls(session)["page"] + "copy/?path=",
    )
    return JsonResponse(answer)


@require_GET
@workspace_page
def session_copy(
    request: HttpRequest, membership: Membership, workspace: Workspace, session_id: str
) -> HttpResponse:
    """One file as the session has it now, read-only, with its diff against the
    branch's version at the commit the session's files were last brought to."""
    session = session_of(membership, workspace, session_id, use=True)
    ctx: dict[str, Any] = {
        **page_context(request, membership, workspace),
        "session": session,
        "session_url": session_urls(session)["page"],
        "branches": [],
    }
    try:
        path = clean_path(request.GET.get("path", ""))
        ctx["path"] = path

        def texts(row: Snapshot, store: GitStore) -> tuple[Snapshot, str | None, str | None]:
            ours = _text_at(store, row.tree.encode(), path)
            return row, ours, _text_at(store, store.commit(row.base_commit).tree, path)

        row, ours, theirs = _with_read(session, texts)
    except BerthError as e:
        ctx["error"] = e.message
        return render(request, "sessions/session_copy.html", ctx, status=e.status)
    patch = "".join(
        difflib.unified_diff(
            (theirs or "").splitlines(keepends=True),
            (ours or "").splitlines(keepends=True),
            f"a/{path}",
            f"b/{path}",
        )
    )
    ctx.update(
        row=row,
        content=ours,
        absent=ours is None,
        on_branch=theirs is not None,
        rows=diff_lines(patch) if patch else [],
        editor_url=page_url(workspace, ref=session.ref, path=path),
    )
    return render(request, "sessions/session_copy.html", ctx)


def _text_at(store: GitStore, tree: bytes, path: str) -> str | None:
    """A file of a tree as text: None when absent (or not a file), a note when it is
    binary or too large to show."""
    node, mode = tree, MODE_TREE
    for part in path.encode().split(b"/"):
        obj = store.repo[node]
        if mode != MODE_TREE or not isinstance(obj, Tree) or part not in obj:
            return None
        mode, node = obj[part]
    if mode not in (MODE_FILE, MODE_EXEC):
        return None
    data = store.blob(node)
    if len(data) > history.MAX_DIFF_BYTES or b"\0" in data[:8000]:
        return f"({len(data)} bytes, binary or too large to show here)\n"
    return data.decode("utf-8", "replace")
