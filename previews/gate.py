"""Who may reach a preview through its own host, and what the gateway needs to know of it.

Private by default (docs/security.md): the app checks access and hands out a single-use
ticket (previews.viewers.issue_ticket); the preview host exchanges it once for a cookie
of its own, signed, naming the preview and the person (or token) it was issued to.
Every use of the cookie re-checks that they may still see the preview (cached briefly).

Everything here is synchronous ORM code: its callers run it on a worker thread.
"""

import hashlib
import hmac
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from functools import cached_property
from typing import Any
from urllib.parse import quote

from django.conf import settings
from django.core import signing
from django.utils import timezone

from accounts.models import ApiToken, Membership
from core import keys
from logs import logstore
from previews.models import Preview, PreviewState, PreviewTicket
from sandbox.netns import Namespace

COOKIE = "berth_preview"  # SameSite=None; Secure; Partitioned: works in iframes
COOKIE_LAX = "berth_preview_lax"  # host-only SameSite=Lax: top-level tabs, any scheme
COOKIE_SALT = "berth.preview.cookie"
TICKET_PATH = "/__berth/ticket"
# The preview gateway (previews.gateway) asks the web process what to do with a request
# it cannot decide itself (previews.decide), naming the real client in X-Berth-Client
# and a WebSocket handshake in X-Berth-Upgrade; X-Berth-Gateway proves the gateway sent
# it. None of them ever reaches an app.
GATEWAY_HEADERS = (b"x-berth-gateway", b"x-berth-client", b"x-berth-upgrade")
# The web process's verdict "serve it": the target, as the gateway is to serve it.
VERDICT = b"x-berth-target"


@dataclass(frozen=True)
class Target:
    """A preview as the proxy sees it (cached for about a second)."""

    pk: int
    public_id: str
    team_id: int
    workspace: str
    state: str
    reason: str
    message: str
    exit_code: int | None
    public: bool
    port: int
    ns: Namespace | None
    run_id: str | None
    # A preview of a session (previews.of_sessions): the session, and its state. Its
    # container is forwarded into only while the session is ready: a freezing or
    # frozen one is resumed first by the web process (previews.decide).
    session: str = ""
    session_state: str = ""
    # The secrets the session's execs were granted: a token viewer must cover them
    # (sessions.access.covers), since the session's app can read them.
    secrets: tuple[str, ...] = ()

    @cached_property  # asked of every request to the preview: a Target never changes
    def ready(self) -> bool:
        return (
            self.state == PreviewState.READY
            and self.ns is not None
            and self.session_state in ("", "ready")
        )

    @property
    def paused(self) -> bool:
        """A live preview of a session that is freezing or frozen: resumed first."""
        return self.state in (PreviewState.STARTING, PreviewState.READY) and (
            self.session_state in ("freezing", "frozen")
        )

    @property
    def coming_up(self) -> bool:
        """Not ready yet, but on its way (not stopped, failed or crashed)."""
        return self.state == PreviewState.STARTING or (
            self.state == PreviewState.READY and self.ns is None
        )

    def verdict(self) -> bytes:
        """The target as the web process hands it to the gateway (VERDICT)."""
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def of_verdict(cls, value: bytes) -> "Target":
        fields = json.loads(value)
        ns = fields.pop("ns")
        secrets = tuple(fields.pop("secrets", ()))
        return cls(**fields, ns=Namespace(**_with_host(ns)) if ns else None, secrets=secrets)


def _with_host(ns: dict[str, Any]) -> dict[str, Any]:
    """A verdict from a web process older than hosts (a rolling upgrade) names none: its
    namespace was then this machine's, as every one was."""
    return {"host": settings.SANDBOX_HOST, **ns}


def gateway_key() -> bytes:
    """What the gateway sends in X-Berth-Gateway: derived from the gateway key (core.keys),
    which the gateways and the web process share, and nobody else has (not SECRET_KEY:
    a runner host holds none)."""
    return (
        hmac.new(keys.GATEWAY.value().encode(), b"berth.preview.gateway", hashlib.sha256)
        .hexdigest()
        .encode()
    )


def from_gateway(scope: dict[str, Any], trust: bool = True) -> dict[str, Any]:
    """The scope as the gateway saw the request: the client it names and whether it is
    a WebSocket handshake (`berth.upgrade`), when the request carries the gateway's key
    (and `trust`: preview and release hosts only); its headers never go further
    either way. `berth.gateway` says whether the gateway's key was there."""
    headers = scope["headers"]
    if not any(k in GATEWAY_HEADERS for k, _ in headers):
        return {**scope, "berth.gateway": False}
    named = dict(headers)
    kept = [(k, v) for k, v in headers if k not in GATEWAY_HEADERS]
    key = named.get(b"x-berth-gateway", b"")
    if trust and key and hmac.compare_digest(key, gateway_key()):
        client = named.get(b"x-berth-client", b"").decode("latin-1")
        return {
            **scope,
            "headers": kept,
            "client": (client, 0),
            "berth.gateway": True,
            "berth.upgrade": named.get(b"x-berth-upgrade") == b"websocket",
        }
    return {**scope, "headers": kept, "berth.gateway": False}


def moves_group(public_id: str) -> str:
    """The channel-layer group told of each move of a preview (previews.actions)."""
    return f"preview_moves_{public_id}"


def target(public_id: str) -> Target | None:
    p = (
        Preview.objects.select_related("workspace", "run", "session")
        .filter(public_id=public_id)
        .first()
    )
    if p is None:
        return None
    ns = (
        Namespace(p.sandbox_pid, p.sandbox_netns, p.process_host)
        if p.sandbox_pid and p.sandbox_netns
        else None
    )
    return Target(
        p.pk,
        p.public_id,
        p.workspace.team_id,
        p.workspace.slug,
        p.state,
        p.reason,
        p.message,
        p.exit_code,
        p.public,
        p.port,
        ns,
        p.run.public_id if p.run else None,
        p.session.public_id if p.session else "",
        p.session.state if p.session else "",
        tuple(p.session.secret_names or ()) if p.session else (),
    )


def redeem(nonce: str, public_id: str) -> str | None:
    """The cookie value for a ticket, once: None if it is unknown, used, expired or
    issued for another preview."""
    ticket = PreviewTicket.use(nonce, public_id)
    if ticket is None:
        return None
    return viewer_cookie_for(public_id, ticket.user_id, ticket.token_id)


def _cookie_key() -> str:
    """Preview cookies are signed with a key of their own (core.keys), which gateways
    and web share: not SECRET_KEY, which signs sign-in sessions and no runner holds."""
    return keys.PREVIEW_COOKIE.value()


def viewer_cookie_for(public_id: str, user_id: int, token_id: int | None) -> str:
    """A preview cookie's value: the preview, and who it lets in (a person, through a
    token or not); checked again at every use (`viewer_standing`)."""
    return signing.dumps(
        {"p": public_id, "u": user_id, "t": token_id}, key=_cookie_key(), salt=COOKIE_SALT
    )


# What ends a viewer's access, as the close code a tunnel gets (the codes Berth's own
# WebSockets use, accounts.socket_access): the cookie or its token no longer holds
# (expired, revoked, or no cookie), its token does not cover the secrets granted to
# the preview's session (403 `secret_grant_required`, as on the session's own doors),
# or its person is no longer in the team (or the preview is gone).
CLOSE_CREDENTIALS = 4401
CLOSE_GRANT = 4403
CLOSE_NO_ACCESS = 4404
# The gateways and the web process's deciding door hear here which cached viewer
# answers to drop at once (previews.lookups.Lookups.drop): a session's grant (its
# previews), a revoked token, a member removed.
VIEWERS_GROUP = "preview_viewers"


@dataclass(frozen=True)
class Standing:
    """A viewer's access to a preview: `code` None while it holds (until `until` at
    the latest, when the cookie or its token expires), else why it does not."""

    code: int | None
    until: datetime | None = None


def cookie_user(cookie: str | None) -> int | None:
    """The person a preview cookie was issued to (its signature checked, no database)."""
    return cookie_holder(cookie)[0]


def cookie_holder(cookie: str | None) -> tuple[int | None, int | None]:
    """Who is behind a preview cookie: its person and token ids (its signature checked,
    no database); Nones for a cookie that is not one."""
    if not cookie:
        return None, None
    try:
        data = signing.loads(
            cookie, key=_cookie_key(), salt=COOKIE_SALT, max_age=settings.PREVIEW_COOKIE_S
        )
    except signing.BadSignature:
        return None, None
    if not isinstance(data, dict):
        return None, None
    user, token = data.get("u"), data.get("t")
    return (
        user if isinstance(user, int) else None,
        token if isinstance(token, int) else None,
    )


def viewer_standing(cookie: str | None, t: Target) -> Standing:
    """Whether a preview cookie lets its holder see preview `t` now, and until when."""
    if not cookie:
        return Standing(CLOSE_CREDENTIALS)
    try:
        data = signing.loads(
            cookie, key=_cookie_key(), salt=COOKIE_SALT, max_age=settings.PREVIEW_COOKIE_S
        )
    except signing.BadSignature:
        return Standing(CLOSE_CREDENTIALS)
    if not isinstance(data, dict) or data.get("p") != t.public_id:
        return Standing(CLOSE_CREDENTIALS)
    if not Membership.objects.filter(team=t.team_id, user=data.get("u")).exists():
        return Standing(CLOSE_NO_ACCESS)
    # The signature checked, its time stamp is the cookie's own (`payload:time:sig`).
    signed = signing.b62_decode(cookie.rsplit(":", 2)[1])
    until = datetime.fromtimestamp(signed + settings.PREVIEW_COOKIE_S, UTC)
    if data.get("t") is None:
        return Standing(None, until)
    token = ApiToken.objects.filter(pk=data["t"], team=t.team_id).first()
    if (
        token
        and token.revoked_at is None
        and token.expires_at > timezone.now()
        and token.allows_workspace(t.workspace)
        and token.has_scope("preview")
    ):
        if not set(t.secrets) <= set(token.secret_names or ()):
            return Standing(CLOSE_GRANT)
        return Standing(None, min(until, token.expires_at))
    return Standing(CLOSE_CREDENTIALS)


def berth_cookie_names() -> set[str]:
    """Berth's own cookies: never forwarded to an app, never settable by one."""
    return {settings.SESSION_COOKIE_NAME, settings.CSRF_COOKIE_NAME, COOKIE, COOKIE_LAX}


def request_target(scope: dict[str, Any]) -> bytes:
    """The request's path and query as the client sent them."""
    path = scope.get("raw_path") or quote(scope["path"]).encode()
    qs = scope.get("query_string") or b""
    return bytes(path) + (b"?" + qs if qs else b"")


def last_lines(run_id: str | None, n: int = 20) -> list[str]:
    if not run_id:
        return []
    total = logstore.count(run_id)
    return [e["text"] for e in logstore.read(run_id, max(0, total - n), n)]


def cookie_headers(value: str) -> list[tuple[bytes, bytes]]:
    """Both cookies, host-only (no Domain) and HttpOnly. Chromium keeps and sends a
    cookie set inside an iframe of another site only when it is partitioned
    (docs/architecture.md, "Engine facts"), and Secure is accepted on
    http://*.localhost; the Lax one covers a top-level tab where a Secure cookie over
    plain http would be refused."""
    age = settings.PREVIEW_COOKIE_S
    common = f"Path=/; Max-Age={age}; HttpOnly"
    return [
        (b"set-cookie", f"{COOKIE}={value}; {common}; SameSite=None; Secure; Partitioned".encode()),
        (b"set-cookie", f"{COOKIE_LAX}={value}; {common}; SameSite=Lax".encode()),
    ]


# What a release host serves: deploys registers it when it is ready (deploys.apps);
# previews, below deploys, knows releases only as preview processes it is told of.
ReleaseRoutes = Callable[[str, str], str | None]
_release_routes: list[ReleaseRoutes] = []


def register_release_routes(routes: ReleaseRoutes) -> None:
    """Say which release process a release host `<workspace>--<team>` serves now."""
    _release_routes[:] = [routes]


def routed_process(workspace: str, team: str) -> str | None:
    """The public id of the release process a workspace's release host serves now
    (None with nothing released, or no deploys app to ask)."""
    return _release_routes[0](workspace, team) if _release_routes else None
