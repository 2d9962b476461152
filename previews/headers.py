"""The header rules both preview doors apply (the proxy in daphne and the gateway):
what of a client's request reaches an app, and what of an app's answer reaches the
client. Berth's credentials never go in; hop-by-hop headers never cross; an app never
sets a cookie for another domain or one named like Berth's; a non-public target takes
nothing from another site's pages but navigations, and is framed only by Berth."""

import contextlib
import functools
from collections.abc import Sequence
from http.cookies import CookieError, SimpleCookie

from django.conf import settings

from previews import gate

HOP_BY_HOP = {
    b"connection",
    b"keep-alive",
    b"proxy-connection",
    b"te",
    b"trailer",
    b"transfer-encoding",
    b"upgrade",
    b"proxy-authenticate",
    b"proxy-authorization",
}
# Never forwarded: Berth's credentials, and forwarding headers a client could forge.
DROP_REQUEST = HOP_BY_HOP | {
    b"authorization",
    b"content-length",
    b"expect",
    b"forwarded",
    b"x-forwarded-for",
    b"x-forwarded-proto",
    b"x-forwarded-host",
    b"x-forwarded-port",
    b"x-real-ip",
    *gate.GATEWAY_HEADERS,
}


@functools.lru_cache(maxsize=4096)
def parse_cookies(header: bytes) -> dict[str, str]:
    """Parsed once per distinct header: a browser sends the same one on every request."""
    jar: SimpleCookie = SimpleCookie()
    with contextlib.suppress(CookieError):  # malformed: as if there were none
        jar.load(header.decode("latin-1"))
    return {k: m.value for k, m in jar.items()}


def connection_named(headers: Sequence[tuple[bytes, bytes]]) -> set[bytes]:
    """Headers the `Connection` header names: hop-by-hop for this message only."""
    return {
        t.strip().lower().encode()
        for k, v in headers
        if k == b"connection"
        for t in v.decode("latin-1").split(",")
    }


def viewer_cookie(cookies: dict[str, str]) -> str | None:
    return cookies.get(gate.COOKIE) or cookies.get(gate.COOKIE_LAX)


def forwarded_headers(
    given: Sequence[tuple[bytes, bytes]], client: str, scheme: str
) -> list[tuple[bytes, bytes]]:
    """The client's headers (names in lower case) as the app gets them: no hop-by-hop
    ones, no Authorization, none of Berth's cookies, X-Forwarded-* from the real
    connection. Framing (Content-Length, Transfer-Encoding) is the caller's to add."""
    named_hop = connection_named(given)
    berth = gate.berth_cookie_names()
    headers: list[tuple[bytes, bytes]] = []
    host = b""
    for key, value in given:
        if key == b"host":
            host = value
        if key in DROP_REQUEST or key in named_hop:
            continue
        if key == b"cookie":
            kept = [
                part
                for part in value.decode("latin-1").split(";")
                if part.split("=", 1)[0].strip() not in berth and part.strip()
            ]
            if not kept:
                continue
            value = ";".join(kept).strip().encode("latin-1")
        headers.append((key, value))
    headers += [
        (b"x-forwarded-for", client.encode()),
        (b"x-forwarded-proto", scheme.encode()),
        (b"x-forwarded-host", host),
    ]
    return headers


def response_headers(
    headers: Sequence[tuple[bytes, bytes]], host: str
) -> list[tuple[bytes, bytes]]:
    """The app's headers minus hop-by-hop ones and cookies it may not set: one with a
    Domain other than the preview's own host, or named like Berth's."""
    named_hop = connection_named(headers)
    out = []
    for key, value in headers:
        if key in HOP_BY_HOP or key in named_hop:
            continue
        if key == b"set-cookie" and not cookie_allowed(value.decode("latin-1"), host):
            continue
        out.append((bytes(key), bytes(value)))
    return out


def cookie_allowed(header: str, host: str) -> bool:
    name, _, rest = header.partition("=")
    if name.strip() in gate.berth_cookie_names():
        return False
    for attribute in rest.split(";")[1:]:
        key, _, value = attribute.partition("=")
        if key.strip().lower() == "domain" and value.strip().lstrip(".").lower() != host:
            return False
    return True


# -- what a private target takes from other sites --------------------------------------
#
# Every preview and release host shares one registrable domain, so to a browser they
# are all one *site*: a page on one team's public release is "same-site" to another
# team's private preview, its SameSite=Lax viewer cookie goes along with that page's
# requests, and WebSockets are not bound by CORS at all. So a non-public target takes
# only what its own pages send, and what a browser navigates to (see `refusal`).

SAFE_METHODS = frozenset({"GET", "HEAD"})
# Fetch metadata a browser sends when a person (or a page) navigates to a document or
# a frame, as opposed to a page's script, image, style or form fetching it.
NAVIGATION_DESTS = frozenset({b"document", b"iframe", b"frame"})
DEFAULT_PORTS = {"http": ":80", "https": ":443"}
REFUSED = "cross_origin_refused"


def own_origin(scheme: str, host: str) -> str:
    """The origin a browser names for pages served on `host` (the Host header, lower
    case) over `scheme`: the default port left out, as a browser leaves it out."""
    scheme = "https" if scheme in ("https", "wss") else "http"
    default = DEFAULT_PORTS[scheme]
    if host.endswith(default):
        host = host[: -len(default)]
    return f"{scheme}://{host}"


def _normal_origin(origin: bytes) -> str:
    scheme, sep, host = origin.decode("latin-1").strip().lower().partition("://")
    return own_origin(scheme, host) if sep and scheme in DEFAULT_PORTS else "null"


def refusal(
    headers: Sequence[tuple[bytes, bytes]], method: str, websocket: bool, own: str
) -> str | None:
    """Why a request to a non-public target is refused, or None to let it through.

    1. A WebSocket, or a request that is not GET/HEAD, whose `Origin` is not the
       target's own origin (`own`, from `own_origin`): another page's form post,
       script write or socket, which the viewer cookie would otherwise authorise.
       Browsers send Origin on every cross-origin one of these (`null` from an opaque
       origin, refused too); no Origin at all is a client that is not a browser
       (curl, an agent with a preview link), which no other site can drive.
    2. Any request whose `Sec-Fetch-Site` is present and neither `same-origin` (the
       app's own pages) nor `none` (typed in, a bookmark), except a navigation:
       `Sec-Fetch-Mode: navigate` with `Sec-Fetch-Dest` document, iframe or frame.
       A navigation must pass whatever site it comes from: Berth's "Open in new tab"
       and its preview frame come from Berth's origin (`cross-site`, or `same-site`
       where Berth shares the domain), through the ticket redirect, and any site may
       link to a preview. What a navigation shows is the browser's alone (no script
       of the other site reads it), a frame is only drawn inside Berth (the answers'
       `frame-ancestors`, see `with_frame_ancestors`), and a navigation that is not
       GET/HEAD from another origin (a form posted at it) already fell to rule 1.
       What falls here is another site's page loading the target as a subresource
       (fetch, img, script, style, an <object>) with the visitor's cookie.
    A client that sends no fetch metadata (not a browser, or an old one) passes rule 2.
    """
    origin = site = mode = dest = None
    for key, value in headers:
        if key == b"origin":
            origin = value
        elif key == b"sec-fetch-site":
            site = value.strip().lower()
        elif key == b"sec-fetch-mode":
            mode = value.strip().lower()
        elif key == b"sec-fetch-dest":
            dest = value.strip().lower()
    if (
        (websocket or method not in SAFE_METHODS)
        and origin is not None
        and _normal_origin(origin) != own
    ):
        what = "WebSockets" if websocket else "requests that change things"
        return (
            f"This address is private to its team and takes {what} only from its own "
            f"pages; this one came from {origin.decode('latin-1')[:200]}. Open the "
            f"page at {own} itself and act from there."
        )
    if (
        site is not None
        and site not in (b"same-origin", b"none")
        and not (mode == b"navigate" and dest in NAVIGATION_DESTS)
    ):
        return (
            "This address is private to its team and serves its content only to its "
            "own pages; a page of another site asked for it "
            f"(Sec-Fetch-Site: {site.decode('latin-1')[:40]}). Link to it instead, or "
            "ask a team admin to make it public if other sites should load it."
        )
    return None


def berth_origins(app_url: str) -> bytes:
    """Berth's own origin(s) as CSP sources: APP_URL's, or, unset, localhost and
    127.0.0.1 on the port given (app_url is then http://localhost:<port>)."""
    scheme, _, rest = app_url.partition("://")
    origin = f"{scheme}://{rest.split('/', 1)[0]}"
    if settings.APP_URL_GIVEN:
        return origin.encode()
    return f"{origin} {origin.replace('://localhost', '://127.0.0.1', 1)}".encode()


def with_frame_ancestors(
    headers: list[tuple[bytes, bytes]], berth: bytes
) -> list[tuple[bytes, bytes]]:
    """A non-public target's answer, drawn in a frame only by Berth's pages (its
    preview pane) or the target's own: `Content-Security-Policy: frame-ancestors` as
    a header of its own, so an app's own CSP still holds (a browser enforces every
    policy it is given). A browser ignores X-Frame-Options next to frame-ancestors,
    so an app's DENY or SAMEORIGIN is said again in the policy instead of lost."""
    sources = b"'self' " + berth
    for key, value in headers:
        if key == b"x-frame-options":
            said = value.strip().lower()
            if said == b"deny":
                sources = b"'none'"
            elif said == b"sameorigin":
                sources = b"'self'"
    return [*headers, (b"content-security-policy", b"frame-ancestors " + sources)]
