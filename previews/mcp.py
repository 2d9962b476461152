"""MCP tools onto previews: start one and wait until it answers (or says why not), look
at it with a fetch through the preview gateway (previews.fetch), stop it."""

import asyncio

from channels.db import database_sync_to_async

from accounts.access import Actor
from accounts.auth import actor_of
from core.errors import Conflict, Invalid
from core.mcp import Ctx, tool
from previews import actions, gate, of_sessions
from previews.access import access_preview, managed_preview
from previews.fetch import fetch
from previews.links import ticket_url
from previews.models import Preview, PreviewState
from previews.schemas import AgentPreview, FetchOut
from sessions.access import access_session
from workspaces.mcp import workspace_for

MAX_WAIT_S = 120


async def _wait_settled(public_id: str, seconds: float) -> None:
    """Until the preview is no longer starting (the agent moves it), polling the row
    asynchronously: nothing of Django's is held while we wait."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while loop.time() < deadline:
        state = await database_sync_to_async(
            lambda: (
                Preview.objects.filter(public_id=public_id).values_list("state", flat=True).first()
            )
        )()
        if state != PreviewState.STARTING:
            return
        await asyncio.sleep(0.1)


def _reload(public_id: str) -> Preview:
    return Preview.objects.select_related("workspace__team", "run", "session__run").get(
        public_id=public_id
    )


async def _settled_answer(public_id: str, actor: Actor, wait_seconds: int) -> AgentPreview:
    """The preview once settled (or wait_seconds on), with a short-lived link if live."""
    await _wait_settled(public_id, max(0, min(wait_seconds, MAX_WAIT_S)))

    def answer() -> AgentPreview:
        preview = _reload(public_id)
        link = ticket_url(preview, actor, "")[0] if preview.is_live else None
        return AgentPreview.of_preview(preview, link)

    return await database_sync_to_async(answer)()


@tool()
async def start_preview(
    ctx: Ctx, workspace: str, ref: str | None = None, wait_seconds: int = 60
) -> AgentPreview:
    """Start the app of a commit with workspace.toml's [preview] command and port, and
    wait up to wait_seconds (default 60, max 120) until it answers its health check or
    fails: not_listening, health_failed, listening_on_other_port (the app listens, but on
    another port than workspace.toml says: the message names it and the line to change,
    within about 3 s), process_exited (with exit_code and its last lines of output, at
    once); the message says what to do. Usually 1-3 s.
    Returns a short-lived link; next: fetch_preview to see a page."""
    actor = await actor_of(ctx)

    def start() -> str:
        w = workspace_for(actor, workspace, "preview")
        return actions.start_preview(w, actor, ref).public_id

    public_id = await database_sync_to_async(start)()
    return await _settled_answer(public_id, actor, wait_seconds)


@tool()
async def preview_session(
    ctx: Ctx, session: str, port: int, health_path: str | None = None, wait_seconds: int = 30
) -> AgentPreview:
    """Preview an app you started in a session (say exec(session, "setsid -f python3 -m
    http.server 8080 >/dev/null 2>&1") with the exec waiting until it listens: an exec's
    process group is killed at its end; a detached exec works too, but keeps the session
    from freezing while it runs): served from the session's container on `port`, and
    waits up to wait_seconds (default 30, max 120) until GET health_path (default /)
    answers, or says why not (not_listening names the fix). The preview lives as long
    as the session: a request to it is activity, and resumes a frozen session; the
    session's stop ends it (session_ended). Returns a short-lived link; next:
    fetch_preview to see a page."""
    actor = await actor_of(ctx)

    def start() -> str:
        found = access_session(actor, session, scope="preview")
        return of_sessions.preview_session(found, actor, port, health_path).public_id

    public_id = await database_sync_to_async(start)()
    return await _settled_answer(public_id, actor, wait_seconds)


@tool()
async def get_preview(ctx: Ctx, preview_id: str) -> AgentPreview:
    """A preview's state, why it is not up if it is not, and its log tail. Instant."""
    actor = await actor_of(ctx)
    return await database_sync_to_async(
        lambda: AgentPreview.of_preview(_reload(access_preview(actor, preview_id).public_id))
    )()


@tool()
async def stop_preview(ctx: Ctx, preview_id: str) -> AgentPreview:
    """Stop a preview (its source stays in Git; its process and memory go). Instant."""
    actor = await actor_of(ctx)

    def stop() -> AgentPreview:
        preview = managed_preview(actor, preview_id)
        actions.stop_preview(preview, actor)
        return AgentPreview.of_preview(_reload(preview.public_id))

    return await database_sync_to_async(stop)()


@tool()
async def fetch_preview(
    ctx: Ctx, preview_id: str, path: str = "/", method: str = "GET", body: str | None = None
) -> FetchOut:
    """Request `path` from a ready preview, as a browser would through the preview
    gateway (no Berth credential reaches the app), and get the status, headers and up to 256 KB
    of body. For an agent that cannot open a browser. Instant for a small page."""
    actor = await actor_of(ctx)
    if not path.startswith("/") or any(c in path for c in "\r\n "):
        raise Invalid(
            "path must start with / and have no spaces or line breaks.", {"field": "path"}
        )
    method = method.upper()
    if method not in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"):
        raise Invalid(f"Unsupported method {method!r}.", {"field": "method"})

    def target() -> tuple[str, str]:
        preview = access_preview(actor, preview_id)
        if preview.state != PreviewState.READY or not (
            preview.sandbox_pid and preview.sandbox_netns
        ):
            raise Conflict(
                f"The preview is {preview.state}"
                + (f" ({preview.message})" if preview.message else "")
                + "; start_preview or restart it first.",
                {"state": preview.state},
                code="preview_not_ready",
            )
        Preview.record_request(preview.pk)  # an agent's look counts as use: not idle
        # The person's own cookie, for this one request and never handed out: access
        # was checked just now, by this door's rules (a token needs no `preview` scope).
        return preview.host, gate.viewer_cookie_for(preview.public_id, actor.user.pk, None)

    host, cookie = await database_sync_to_async(target)()
    got = await fetch(host, cookie, method, path, (body or "").encode(), FetchOut.BODY_CAP)
    out_headers: dict[str, str] = {}
    for name, value in got.headers:
        key = name.decode("latin-1").lower()
        out_headers[key] = (out_headers[key] + ", " if key in out_headers else "") + value.decode(
            "latin-1"
        )
    return FetchOut(
        status=got.status,
        headers=out_headers,
        body=bytes(got.body[: FetchOut.BODY_CAP]).decode("utf-8", "replace"),
        truncated=got.truncated,
    )
