"""`git clone`/`fetch`/`push` over smart HTTP, served by dulwich.

Authentication is an API token as the password (any username): fetching needs
`workspace:read`, pushing `workspace:write`. dulwich's WSGI app runs on a thread pool
of its own, so a long clone never stalls the thread Django runs sync views on.
"""

import asyncio
import base64
import binascii
import io
import logging
import sys
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from dulwich.protocol import (
    CAPABILITY_SIDE_BAND,
    CAPABILITY_SIDE_BAND_64K,
)
from dulwich.server import Backend, ReceivePackHandler, UploadPackHandler
from dulwich.web import HTTPGitApplication

from accounts.access import Actor
from accounts.actions import record
from accounts.auth import authenticate_bearer
from accounts.models import Team
from core.errors import BerthError, NotFound
from workspaces import contract_writes, push_report
from workspaces.access import access_workspace
from workspaces.gitstore import GitStore
from workspaces.models import Workspace
from workspaces.pushcheck import PushCheck
from workspaces.signals import announce_branch_moved
from workspaces.store import open_store

log = logging.getLogger(__name__)

GIT_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="git-http")


def _text(status: int, message: str, **headers: str) -> HttpResponse:
    response = HttpResponse(message + "\n", status=status, content_type="text/plain")
    for key, value in headers.items():
        response[key.replace("_", "-")] = value
    return response


def _challenge(message: str) -> HttpResponse:
    return _text(401, message, WWW_Authenticate='Basic realm="Berth", charset="UTF-8"')


def _token_from(header: str) -> str | None:
    """The token from `Basic base64(user:token)` (what git sends) or `Bearer token`."""
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer":
        return value.strip()
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return decoded.partition(":")[2] or None


_SERVICES = ("git-upload-pack", "git-receive-pack")


def _smart(request: HttpRequest, rest: str) -> bool:
    """Only Git's smart protocol: its ref advertisement and its two services. dulwich
    would also serve the dumb protocol's paths (`objects/ab/cdef…`, packs, HEAD), which
    hand out any object by its id, reachable or not: a refused push's objects, a run's
    unpublished tree. Those are never served."""
    if request.method == "GET":
        return rest == "info/refs" and request.GET.get("service") in _SERVICES
    return request.method == "POST" and rest in _SERVICES


def _is_push(request: HttpRequest, rest: str) -> bool:
    return rest.endswith("git-receive-pack") or request.GET.get("service") == "git-receive-pack"


def _authorize(header: str, team_slug: str, slug: str, scope: str) -> tuple[Actor, Workspace]:
    token = _token_from(header)
    actor = authenticate_bearer(f"Bearer {token}" if token else "")
    assert actor.token is not None
    team = Team.objects.get(pk=actor.token.team_id)
    if team.slug != team_slug:
        raise NotFound("No such repository.")
    return actor, access_workspace(actor, team, slug, scope)


def _body(request: HttpRequest) -> bytes:
    """The request body, gunzipped (git gzips large requests), capped after inflation
    so a small gzip bomb cannot fill the disk."""
    limit = settings.GIT_MAX_PUSH_BYTES
    raw = request.read(limit + 1)
    if len(raw) > limit:
        raise BerthError("push too large", status=413)
    if request.headers.get("Content-Encoding", "").lower() != "gzip":
        return raw
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    data = inflater.decompress(raw, limit + 1)
    if len(data) > limit or inflater.unconsumed_tail:
        raise BerthError("push too large", status=413)
    return data


class _Backend(Backend):
    def __init__(self, store: GitStore) -> None:
        self.store = store

    def open_repository(self, path: str) -> Any:
        return self.store.repo


def _serve(
    workspace: Workspace, environ: dict[str, Any], push: bool
) -> tuple[str, list, bytes, dict, dict, bool]:
    """Run dulwich's WSGI app for one request (on a GIT_POOL thread)."""
    store = GitStore(workspace.repo_path)
    check = PushCheck(store.repo, workspace.default_branch, workspace.allow_force_push)
    answer: dict[str, Any] = {"sideband": False}

    class Receive(ReceivePackHandler):
        # No hooks ever run; our checks stand in for update hooks.
        def _on_pre_receive(self, client_refs: Any) -> None:
            return None

        def _on_update(self, ref_name: Any, old_sha: Any, new_sha: Any) -> bytes | None:
            return check.check(ref_name, old_sha, new_sha)

        def _on_post_receive(self, client_refs: Any) -> None:
            # No hook: whether the client reads progress lines, for the sessions' report.
            answer["sideband"] = self.has_capability(
                CAPABILITY_SIDE_BAND_64K
            ) or self.has_capability(CAPABILITY_SIDE_BAND)

        def _receive_max_input_size(self) -> int | None:
            return int(settings.GIT_MAX_PUSH_BYTES)

    app = HTTPGitApplication(
        _Backend(store),
        dumb=False,
        handlers={b"git-receive-pack": Receive, b"git-upload-pack": UploadPackHandler},
    )
    chunks: list[bytes] = []

    def start_response(status: str, headers: list, exc_info: Any = None) -> Any:
        answer["status"], answer["headers"] = status, headers
        # dulwich's protocol handlers write through this callable, not the iterable.
        return chunks.append

    try:
        with store.write_lock() if push else _nothing():
            before = store.repo.get_refs() if push else {}
            for chunk in app(environ, start_response):
                chunks.append(chunk)
            after = store.repo.get_refs() if push else {}
        return (
            answer["status"],
            answer["headers"],
            b"".join(chunks),
            before,
            after,
            answer["sideband"],
        )
    finally:
        store.close()
        close_old_connections()


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


@csrf_exempt
async def git_http(request: HttpRequest, team: str, slug: str, rest: str) -> HttpResponse:
    push = _is_push(request, rest)
    scope = "workspace:write" if push else "workspace:read"
    header = request.headers.get("Authorization", "")
    if not header:
        return _challenge("Authentication required: use an API token as the password.")
    if not _smart(request, rest):
        return _text(
            404,
            "Berth serves Git's smart HTTP protocol only; use git 1.6.6 or "
            "later to clone, fetch and push.",
        )
    try:
        actor, workspace = await sync_to_async(_authorize)(header, team, slug, scope)
        body = _body(request) if request.method == "POST" else b""
    except BerthError as e:
        if e.status == 401:
            return _challenge(e.message)
        if e.status == 404:
            return _text(404, "Repository not found.")
        return _text(e.status, e.message)

    environ = {
        "REQUEST_METHOD": request.method,
        "PATH_INFO": "/" + rest,
        "QUERY_STRING": request.META.get("QUERY_STRING", ""),
        "CONTENT_TYPE": request.META.get("CONTENT_TYPE", ""),
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.url_scheme": request.scheme,
        "wsgi.version": (1, 0),
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
        "SERVER_NAME": "berth",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
    }
    loop = asyncio.get_running_loop()
    status, headers, content, before, after, sideband = await loop.run_in_executor(
        GIT_POOL, _serve, workspace, environ, push
    )
    if push and before != after:
        lines = await sync_to_async(_record_push)(workspace, actor, before, after)
        if sideband:
            content = push_report.with_report(content, lines)
    response = HttpResponse(content, status=int(status.split(" ", 1)[0]))
    for key, value in headers:
        response[key] = value
    return response


def _record_push(workspace: Workspace, actor: Actor, before: dict, after: dict) -> list[str]:
    """The push's Activity, then what its answer says (workspaces.push_report)."""
    refs = [
        {
            "ref": ref.decode(),
            "old": (before.get(ref) or b"").decode() or None,
            "new": (after.get(ref) or b"").decode() or None,
        }
        for ref in sorted(set(before) | set(after))
        if before.get(ref) != after.get(ref)
    ]
    record(
        workspace.team,
        actor,
        "git.pushed",
        f"workspace:{workspace.slug}",
        workspace.slug,
        refs=refs,
    )
    # A push brings in every commit its new heads reach that the repository's refs did
    # not: the pusher is behind each, whatever author line the commits carry.
    with open_store(workspace) as store:
        contract_writes.note(
            workspace,
            actor,
            store,
            [r["new"] for r in refs if r["new"] and r["ref"].startswith("refs/heads/")],
            [sha.decode() for ref, sha in before.items() if ref.startswith(b"refs/heads/")],
        )
    lines: list[str] = []
    for ref in refs:
        if ref["new"] and ref["ref"].startswith("refs/heads/"):
            branch = ref["ref"].removeprefix("refs/heads/")
            followers = announce_branch_moved(workspace, branch, ref["new"], actor)
            lines += [push_report.follower_line(f) for f in followers]
            try:
                held = push_report.held_contract(workspace, actor, branch, ref["new"])
            except Exception:  # the push happened: a report that failed must not undo it
                log.exception("no contract report for %s of %s", branch, workspace)
                held = None
            if held:
                lines.append(held)
    return lines
