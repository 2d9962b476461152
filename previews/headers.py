"""The header rules both preview doors apply (the proxy in daphne and the gateway):
what of a client's request reaches an app, and what of an app's answer reaches the
client. Berth's credentials never go in; hop-by-hop headers never cross; an app never
sets a cookie for another domain or one named like Berth's."""

import contextlib
import functools
from collections.abc import Sequence
from http.cookies import CookieError, SimpleCookie

from previews import gate

HOP_BY_HOP = {b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer",
              b"transfer-encoding", b"upgrade", b"proxy-authenticate", b"proxy-authorization"}
# Never forwarded: Berth's credentials, and forwarding headers a client could forge.
DROP_REQUEST = HOP_BY_HOP | {b"authorization", b"content-length", b"expect", b"forwarded",
                             b"x-forwarded-for", b"x-forwarded-proto", b"x-forwarded-host",
                             b"x-forwarded-port", b"x-real-ip", *gate.GATEWAY_HEADERS}

@functools.lru_cache(maxsize=4096)
def parse_cookies(header: bytes) -> dict[str, str]:
    """Parsed once per distinct header: a browser sends the same one on every request."""
    jar: SimpleCookie = SimpleCookie()
    with contextlib.suppress(CookieError):  # malformed: as if there were none
        jar.load(header.decode("latin-1"))
    return {k: m.value for k, m in jar.items()}


def connection_named(headers: Sequence[tuple[bytes, bytes]]) -> set[bytes]:
    """Headers the `Connection` header names: hop-by-hop for this message only."""
    return {t.strip().lower().encode() for k, v in headers if k == b"connection"
            for t in v.decode("latin-1").split(",")}


def viewer_cookie(cookies: dict[str, str]) -> str | None:
    return cookies.get(gate.COOKIE) or cookies.get(gate.COOKIE_LAX)


def forwarded_headers(given: Sequence[tuple[bytes, bytes]], client: str, scheme: str
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
            kept = [part for part in value.decode("latin-1").split(";")
                    if part.split("=", 1)[0].strip() not in berth and part.strip()]
            if not kept:
                continue
            value = ";".join(kept).strip().encode("latin-1")
        headers.append((key, value))
    headers += [(b"x-forwarded-for", client.encode()), (b"x-forwarded-proto", scheme.encode()),
                (b"x-forwarded-host", host)]
    return headers


def response_headers(headers: Sequence[tuple[bytes, bytes]], host: str
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
