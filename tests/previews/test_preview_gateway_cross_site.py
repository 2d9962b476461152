"""The preview gateway's cross-site rules for a private preview (previews/headers.py):
writes and WebSockets only from the preview's own origin, other sites' navigations but
none of their subresource loads, and framing only by Berth — the same rules the web
process applies when the gateway asks it (tests/previews/test_preview_cross_site.py drives the
whole stack from Chromium)."""

from dataclasses import replace
from typing import Any

from previews import gate
from tests.support.gateway import HOST, get, raw

OWN = f"http://{HOST}"
ELSEWHERE = "http://evil12.preview.localhost"  # another preview: the same site


def upgrade(gw: Any, host: str, origin: str) -> bytes:
    return raw(
        gw,
        b"GET /ws HTTP/1.1\r\nHost: %s\r\nCookie: %s=good\r\nOrigin: %s\r\n"
        b"Accept: application/json\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
        b"Sec-WebSocket-Key: x\r\nSec-WebSocket-Version: 13\r\n\r\n"
        % (host.encode(), gate.COOKIE_LAX.encode(), origin.encode()),
        timeout=15,
    )


def test_a_private_preview_takes_writes_and_websockets_from_its_own_origin_only(gw, caplog):
    for origin in (ELSEWHERE, "null", f"https://{HOST}", "http://abc123.preview.localhost.evil"):
        r = get(
            gw,
            "/post",
            {"Origin": origin, "Accept": "application/json"},
            method="POST",
            data=b"forged",
        )
        assert r.status_code == 403, (origin, r.text)
        error = r.json()["error"]
        assert error["code"] == "cross_origin_refused" and origin in error["message"]
    # Its own pages (the default port as a browser leaves it out), and a client that is
    # not a browser (no Origin: no other site can drive it), post as before.
    for headers in ({"Origin": OWN}, {"Origin": OWN.upper() + ":80"}, {}):
        assert get(gw, "/post", headers, method="POST", data=b"x").status_code == 200
    # A WebSocket from elsewhere is refused by the gateway itself, in Berth's error shape.
    got = upgrade(gw, HOST, ELSEWHERE)
    assert got.startswith(b"HTTP/1.1 403") and b'"cross_origin_refused"' in got
    assert b"connection: close" in got
    # An upgrade for a host that is no preview's is refused as before, whole.
    got = upgrade(gw, "localhost", ELSEWHERE)
    assert got.startswith(b"HTTP/1.1 421") and got.count(b"HTTP/1.1 ") == 1
    # ...and neither upgrade, answered at once, tripped the gateway over its own feet.
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text


def test_a_private_preview_serves_other_sites_navigations_but_no_subresources(gw):
    def fetched(site: str, mode: str, dest: str) -> int:
        return get(
            gw, "/page", {"Sec-Fetch-Site": site, "Sec-Fetch-Mode": mode, "Sec-Fetch-Dest": dest}
        ).status_code

    # Another site's page loading it with the visitor's cookie: refused.
    for site in ("same-site", "cross-site"):
        for mode, dest in (
            ("no-cors", "image"),
            ("cors", "empty"),
            ("no-cors", "script"),
            ("no-cors", "empty"),
            ("navigate", "object"),
        ):
            assert fetched(site, mode, dest) == 403, (site, mode, dest)
    # Navigations from anywhere (Berth's frame and "Open in new tab", links), its own
    # pages' requests, and what a person types in.
    for site in ("same-site", "cross-site"):
        for dest in ("document", "iframe", "frame"):
            assert fetched(site, "navigate", dest) == 200, (site, dest)
    assert fetched("same-origin", "cors", "empty") == 200
    assert fetched("none", "navigate", "document") == 200
    assert get(gw, "/page").status_code == 200  # no fetch metadata: not a browser


def test_only_berth_frames_a_private_preview_and_an_apps_own_refusal_holds(gw):
    berth = f"http://localhost:{gw.app[1]} http://127.0.0.1:{gw.app[1]}"
    r = get(gw, "/page")
    assert r.headers["Content-Security-Policy"] == f"frame-ancestors 'self' {berth}"
    # The app's own policy stays (a browser enforces both), and its X-Frame-Options,
    # which a browser ignores next to frame-ancestors, is said again in it.
    r = get(gw, "/framing?xfo=DENY&csp=default-src%20%27self%27")
    assert r.headers["X-Frame-Options"] == "DENY"
    policies = r.raw.headers.getlist("Content-Security-Policy")
    assert policies == ["default-src 'self'", "frame-ancestors 'none'"]
    r = get(gw, "/framing?xfo=SAMEORIGIN")
    assert r.headers["Content-Security-Policy"] == "frame-ancestors 'self'"
    # The gateway's own answers for it too.
    r = get(gw, "/post", {"Origin": ELSEWHERE}, method="POST")
    assert r.headers["Content-Security-Policy"] == f"frame-ancestors 'self' {berth}"


def test_a_public_preview_is_the_apps_own_business(gw):
    forever, target = gw.lookups.targets["abc123"]
    gw.lookups.targets["pub123"] = (forever, replace(target, public_id="pub123", public=True))
    host = {"Host": "pub123.preview.localhost"}
    r = get(gw, "/post", {**host, "Origin": ELSEWHERE}, method="POST", data=b"x")
    assert r.status_code == 200 and "Content-Security-Policy" not in r.headers
    r = get(
        gw,
        "/page",
        {
            **host,
            "Sec-Fetch-Site": "cross-site",
            "Sec-Fetch-Mode": "no-cors",
            "Sec-Fetch-Dest": "image",
        },
    )
    assert r.status_code == 200 and "Content-Security-Policy" not in r.headers
