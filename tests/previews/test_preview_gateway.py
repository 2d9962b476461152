"""The preview gateway's HTTP handling, edge by edge, over real sockets: the gateway
runs in this process on its own event loop, in front of a small HTTP server on this
host standing in for a preview's app (the preview's namespace is this process's own)
and another standing in for Berth's web process. Previews through the whole stack,
gateway included, are test_previews.py's and test_preview_lifecycle.py's."""

import dataclasses
import hashlib
import json
import os
import re
import socket
import time

import pytest
import requests

from previews import gate
from previews.relay import Client
from tests.support.gateway import COOKIE, HOST, App, Web, gateway, get, raw, release, serving
from tests.support.servers import wait_for


def test_the_fast_path_rewrites_headers_as_the_proxy_does(gw):
    r = get(
        gw,
        "/headers?x=1",
        {
            "Authorization": "Bearer berth_x",
            "X-Forwarded-For": "6.6.6.6",
            "X-Berth-Client": "6.6.6.6",
            "Cookie": f"{gate.COOKIE_LAX}=good; sessionid=s; csrftoken=c; mine=kept",
        },
    )
    assert r.status_code == 200, r.text
    seen = r.json()
    assert seen["path"] == "/headers?x=1"
    headers = seen["headers"]
    assert "authorization" not in headers and "x-berth-client" not in headers
    assert headers["cookie"] == "mine=kept"
    assert headers["x-forwarded-for"] == "127.0.0.1"
    assert headers["x-forwarded-host"] == HOST
    assert headers["x-forwarded-proto"] == "http"
    # The app's cookie for another domain is dropped; its own is kept.
    assert r.raw.headers.getlist("Set-Cookie") == ["own=1; Path=/"]


def test_everything_else_goes_to_the_web_process_naming_the_real_client(gw):
    for headers in ({"Cookie": "nothing=here"}, {"Cookie": f"{gate.COOKIE_LAX}=revoked"}):
        r = get(gw, "/", {**headers, "X-Berth-Client": "6.6.6.6", "X-Berth-Gateway": "forged"})
        assert r.json()["web"] is True
        seen = r.json()["headers"]
        assert seen["x-berth-client"] == "127.0.0.1"
        assert seen["x-berth-gateway"] == gate.gateway_key().decode()
        assert seen["host"] == HOST
    # The ticket path too; Berth's own cookie comes back untouched.
    r = get(gw, gate.TICKET_PATH + "?t=x")
    assert r.json()["web"] is True
    assert r.headers["Set-Cookie"] == f"{gate.COOKIE_LAX}=set-by-berth; Path=/"


def read_answer(s: socket.socket) -> tuple[bytes, bytes]:
    """One answer with a Content-Length off a kept connection: its head and body."""
    got = b""
    while b"\r\n\r\n" not in got:
        got += s.recv(65536)
    head, _, body = got.partition(b"\r\n\r\n")
    length = re.search(rb"(?im)^content-length: *(\d+)", head)
    assert length, head
    while len(body) < int(length.group(1)):
        body += s.recv(65536)
    return head, body


def test_a_viewer_answer_older_than_its_time_is_never_used(gw):
    """PREVIEW_VIEWER_TTL_S bounds a cached viewer answer whatever signal was lost (a
    revocation's, a grant's): past it the cookie is looked at again (here it is no
    signed cookie at all, so the web process answers)."""
    assert gw.viewer_ttl <= 5  # the backstop (it was 30 s)
    assert get(gw, "/framing").text == "framing"  # the app's answer, from the cache
    gw.lookups.viewers[("abc123", "good")] = (time.monotonic() - gw.viewer_ttl - 0.1, True)
    assert get(gw, "/framing").json()["web"] is True


def test_a_request_and_an_answer_repeated_on_a_connection_are_checked_and_rewritten_each_time(
    gw,
):
    """The same bytes again on a connection (a client repeating its request, an app
    its answer) skip llhttp's callbacks (previews.relay, previews.relay_upstream), never
    the rules: each repeat is checked against the caches and rewritten both ways."""
    request = (
        b"GET /same HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer berth_x\r\n"
        b"X-Forwarded-For: 6.6.6.6\r\nCookie: %s=good; sessionid=s; mine=kept\r\n\r\n"
        % (HOST.encode(), gate.COOKIE_LAX.encode())
    )
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as s:
        for _ in range(3):
            s.sendall(request)
            head, body = read_answer(s)
            assert head.startswith(b"HTTP/1.1 200"), head
            seen = json.loads(body)
            assert "authorization" not in seen and seen["cookie"] == "mine=kept"
            assert seen["x-forwarded-for"] == "127.0.0.1"
            lines = head.lower().split(b"\r\n")
            cookies = [h for h in lines if h.startswith(b"set-cookie")]
            assert cookies == [b"set-cookie: own=1; path=/"]
            assert b"content-security-policy: frame-ancestors 'none'" in lines
        wait_for(
            lambda: [u for kept in list(gw.idle.values()) for u in kept if u.memo[1]],
            10,
            0.01,
            "the app's repeated answer to be recognised",
        )
        # The viewer's access withdrawn: the same bytes are the web process's to answer.
        gw.lookups.viewers[("abc123", "good")] = (time.monotonic() + 3600, False)
        s.sendall(request)
        _, body = read_answer(s)
        assert json.loads(body)["web"] is True


class Repeats(Client):
    """A client connection that says which of its repeated requests went the short way
    (previews.relay_repeat)."""

    connections: list["Repeats"] = []
    short: list[bool] = []

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        Repeats.connections.append(self)

    def _repeat(self, parsed) -> bool:
        went = super()._repeat(parsed)
        Repeats.short.append(went)
        return went


def test_a_repeat_goes_the_short_way_only_while_what_it_rested_on_holds():
    """A repeated request is decided again from the cache entries its route rested on,
    and the app's repeated answer is written as the client was sent it before, only
    while those entries are the same ones and the cap allows: a target made public or
    stopped, a viewer's access withdrawn, a preview at its cap, each take effect on the
    very next repeat."""
    release.clear()
    Repeats.connections.clear()
    Repeats.short.clear()
    request = b"GET /same HTTP/1.1\r\nHost: %s\r\nCookie: %s=good\r\n\r\n" % (
        HOST.encode(),
        gate.COOKIE_LAX.encode(),
    )
    with (
        serving(App) as app_port,
        serving(Web) as web_port,
        gateway(app_port, web_port, Repeats) as gw,
        socket.create_connection(("127.0.0.1", gw.port), timeout=10) as s,
    ):
        forever, target = gw.lookups.targets["abc123"]

        def ask() -> tuple[bytes, bytes]:
            s.sendall(request)
            head, body = read_answer(s)
            return head.lower(), body

        def served(**changes) -> None:
            gw.lookups.targets["abc123"] = (forever, dataclasses.replace(target, **changes))

        private = b"content-security-policy: frame-ancestors 'none'"
        for _ in range(4):
            head, body = ask()
            assert head.startswith(b"http/1.1 200") and private in head, head
            seen = json.loads(body)  # what reached the app: rewritten each time
            assert "cookie" not in seen and seen["x-forwarded-for"] == "127.0.0.1", seen
        assert Repeats.short == [True, True, True]
        assert Repeats.connections[0].again is not None  # the answer written as before
        # Made public: framing is the app's own business from the next repeat on.
        served(public=True)
        head, _ = ask()
        assert private not in head and b"x-frame-options: deny" in head, head
        assert Repeats.short[-1] is False
        head, _ = ask()
        assert private not in head and Repeats.short[-1] is True
        # Private again, then the viewer's access withdrawn: the web process answers.
        served()
        assert private in ask()[0]
        gw.lookups.viewers[("abc123", "good")] = (forever, False)
        assert json.loads(ask()[1])["web"] is True
        gw.lookups.viewers[("abc123", "good")] = (forever, True)
        assert private in ask()[0] and private in ask()[0]
        assert Repeats.short[-1] is True
        # Stopped: the web process answers (its typed page, in the real thing).
        served(state="stopped")
        assert json.loads(ask()[1])["web"] is True
        served()
        assert private in ask()[0] and private in ask()[0]
        # At its cap: busy, and the connection ends with that answer.
        gw.max_connections = 0
        head, _ = ask()
        assert head.startswith(b"http/1.1 503") and b"connection: close" in head, head
    release.set()


def test_pipelined_requests_are_answered_in_order(gw):
    requests_ = b"".join(
        b"GET /n%d HTTP/1.1\r\nHost: %s\r\nCookie: %s=good\r\n\r\n"
        % (i, HOST.encode(), gate.COOKIE_LAX.encode())
        for i in range(5)
    )
    got = raw(gw, requests_, until=b'"/n4"')
    paths = [
        json.loads(part.split(b"\r\n\r\n", 1)[1].split(b"HTTP/1.1")[0])["path"]
        for part in got.split(b"HTTP/1.1 200")[1:]
    ]
    assert paths == [f"/n{i}" for i in range(5)]


def test_head_chunked_and_http_1_0_answers_are_framed_right(gw):
    with requests.Session() as s:
        r = s.head(f"http://127.0.0.1:{gw.port}/", headers={"Host": HOST, **COOKIE}, timeout=10)
        assert r.status_code == 200 and r.headers["Content-Length"] == "1234" and not r.content
        r = s.get(
            f"http://127.0.0.1:{gw.port}/chunked", headers={"Host": HOST, **COOKIE}, timeout=10
        )  # on the same connection after the HEAD
        assert r.text == "first second third"
        assert r.headers["Transfer-Encoding"] == "chunked"
    old = raw(
        gw,
        b"GET /chunked HTTP/1.0\r\nHost: %s\r\nCookie: %s=good\r\n\r\n"
        % (HOST.encode(), gate.COOKIE_LAX.encode()),
    )
    head, body = old.split(b"\r\n\r\n", 1)
    assert b"connection: close" in head.lower() and b"chunked" not in head.lower()
    assert body == b"first second third"  # ended by the connection's end


def test_request_bodies_stream_both_ways_and_past_the_cap_are_refused(gw, settings):
    body = os.urandom(3 * 1024 * 1024)
    r = get(gw, "/post", method="POST", data=body)
    assert r.headers["X-Length"] == str(len(body))
    assert r.text == hashlib.sha256(body).hexdigest()
    r = get(gw, "/post", method="POST", data=iter([body[:1000], body[1000:]]))  # chunked
    assert r.text == hashlib.sha256(body).hexdigest()

    gw.max_body = 1024 * 1024
    r = get(gw, "/post", {"Accept": "application/json"}, method="POST", data=body)
    assert r.status_code == 413 and r.json()["error"]["code"] == "too_large"
    r = get(
        gw,
        "/post",
        {"Accept": "application/json"},
        method="POST",
        data=iter([body[: 512 * 1024], body[512 * 1024 :]]),
    )
    assert r.status_code == 413


def test_broken_requests_and_apps_get_typed_answers(gw):
    got = raw(gw, b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 400")
    assert b"<h1>Bad request</h1>" in got and b"Invalid header token" in got
    r = get(gw, "/hang-up", {"Accept": "application/json"})
    assert r.status_code == 502 and r.json()["error"]["code"] == "app_broke_request"


def test_nothing_listening_is_a_502_that_says_so(gw):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    t = gw.lookups.targets["abc123"][1]
    gw.lookups.targets["abc123"] = (
        time.monotonic() + 3600,
        gate.Target(*[getattr(t, f) if f != "port" else free for f in t.__dataclass_fields__]),
    )
    r = get(gw, "/", {"Accept": "application/json"})
    assert r.status_code == 502 and r.json()["error"]["code"] == "app_not_listening"


def test_a_preview_at_its_connection_cap_answers_busy(gw):
    gw.max_connections = 1
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as first:
        first.sendall(
            b"GET /hold HTTP/1.1\r\nHost: %s\r\nCookie: %s=good\r\n\r\n"
            % (HOST.encode(), gate.COOKIE_LAX.encode())
        )
        wait_for(
            lambda: gw.lookups.open.get("abc123", 0) >= 1,
            10,
            interval=0.01,
            what="the first request to reach the app",
        )
        r = get(gw, "/", {"Accept": "application/json"})
        assert r.status_code == 503 and r.json()["error"]["code"] == "preview_busy"
        release.set()
        assert first.recv(4096).startswith(b"HTTP/1.1 200")
    wait_for(
        lambda: not gw.lookups.open.get("abc123", 0),
        10,
        interval=0.01,
        what="the finished request to be no longer counted",
    )
    assert get(gw, "/").status_code == 200


def test_an_app_silent_past_the_idle_limit_gets_a_504(gw, settings):
    settings.PREVIEW_IDLE_CONNECTION_S = 1
    r = get(gw, "/slow", {"Accept": "application/json"})
    assert r.status_code == 504 and r.json()["error"]["code"] == "app_timeout"


def test_daphne_trusts_the_client_named_only_with_the_gateway_key():
    scope = {
        "client": ("127.0.0.1", 5),
        "headers": [
            (b"host", b"h"),
            (b"x-berth-client", b"6.6.6.6"),
            (b"x-berth-gateway", b"forged"),
        ],
    }
    forged = gate.from_gateway(scope)
    assert forged["client"] == ("127.0.0.1", 5) and forged["headers"] == [(b"host", b"h")]
    scope["headers"][2] = (b"x-berth-gateway", gate.gateway_key())
    signed = gate.from_gateway(scope)
    assert signed["client"] == ("6.6.6.6", 0) and signed["headers"] == [(b"host", b"h")]


def test_a_client_that_stops_reading_is_cut_at_the_idle_limit_and_frees_its_slot(gw, settings):
    settings.PREVIEW_IDLE_CONNECTION_S = 1
    stuck = [socket.create_connection(("127.0.0.1", gw.port)) for _ in range(3)]
    for s in stuck:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(
            b"GET /big?kb=20000 HTTP/1.1\r\nHost: %s\r\nCookie: %s=good\r\n\r\n"
            % (HOST.encode(), gate.COOKIE_LAX.encode())
        )

    def in_flight() -> int:
        return gw.lookups.open.get("abc123", 0)

    wait_for(in_flight, 10, 0.01, "three requests in flight", until=lambda n: n == 3)
    wait_for(in_flight, 10, 0.01, "the stuck clients to be cut", until=lambda n: n == 0)
    for s in stuck:
        s.close()
    assert get(gw, "/").status_code == 200


class SmallBuffers(Client):
    def connection_made(self, transport) -> None:
        transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        super().connection_made(transport)


def test_a_connection_kept_after_a_slow_client_serves_the_next_request():
    release.clear()
    with (
        serving(App) as app_port,
        serving(Web) as web_port,
        gateway(app_port, web_port, SmallBuffers) as gw,
    ):
        slow = socket.socket()
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.connect(("127.0.0.1", gw.port))
        slow.sendall(
            b"GET /big?kb=300 HTTP/1.1\r\nHost: %s\r\nCookie: %s=good\r\n\r\n"
            % (HOST.encode(), gate.COOKIE_LAX.encode())
        )
        wait_for(lambda: any(gw.idle.values()), 10, 0.01, what="the app's connection to be kept")
        # The kept connection serves another client at once, not after the idle limit.
        assert get(gw, "/after").json()["path"] == "/after"
        slow.close()


def test_an_app_answering_before_the_body_is_sent_leaves_nothing_behind(gw):
    r = get(gw, "/early", method="POST", data=os.urandom(8 * 1024 * 1024))
    assert r.status_code == 200 and r.text == "early"
    # Not kept with part of that body still to send: the next request would queue
    # behind it, and an app that does not read it would take it for a request.
    assert not [
        u for kept in list(gw.idle.values()) for u in kept if u.transport.get_write_buffer_size()
    ]
    assert get(gw, "/next").json()["path"] == "/next"


def test_oversized_heads_odd_upgrades_and_other_hosts_are_refused(gw):
    got = raw(
        gw, b"GET / HTTP/1.1\r\nHost: %s\r\nX-Big: %s\r\n\r\n" % (HOST.encode(), b"a" * 100_000)
    )
    assert got.startswith(b"HTTP/1.1 431")
    # Past what llhttp may hold of an unfinished header, the gateway stops reading.
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: %s\r\nX-Big: " % HOST.encode())
        try:
            for _ in range(64):  # up to 4 MB, never ending the header
                s.sendall(b"a" * 65536)
            while s.recv(65536):
                pass  # a 431, then the end
        except TimeoutError:
            pytest.fail("the gateway kept reading a header that never ends")
        except OSError:
            pass  # reset: it closed with these bytes unread
    got = raw(gw, b"GET /%s HTTP/1.1\r\nHost: %s\r\n\r\n" % (b"a" * 100_000, HOST.encode()))
    assert got.startswith(b"HTTP/1.1 431")
    r = get(gw, "/", {"Host": "localhost", "Accept": "application/json"})
    assert r.status_code == 421 and r.json()["error"]["code"] == "not_a_preview_host"
    # An upgrade to anything but WebSocket is a plain request, and the connection's last.
    got = raw(
        gw,
        b"GET /h2c HTTP/1.1\r\nHost: %s\r\nCookie: %s=good\r\nConnection: Upgrade"
        b"\r\nUpgrade: h2c\r\n\r\nGET /second HTTP/1.1\r\nHost: localhost\r\n\r\n"
        % (HOST.encode(), gate.COOKIE_LAX.encode()),
    )
    assert got.count(b"HTTP/1.1 ") == 1 and b'"/h2c"' in got and b"upgrade" not in got.lower()


def test_what_was_asked_before_bad_input_or_a_half_close_is_still_answered(gw):
    request = b"GET /first HTTP/1.1\r\nHost: %s\r\nCookie: %s=good\r\n" % (
        HOST.encode(),
        gate.COOKIE_LAX.encode(),
    )
    got = raw(gw, request + b"\r\nGARBAGE\r\n\r\n")
    assert b'"/first"' in got and got.count(b"HTTP/1.1 ") == 1
    got = raw(gw, request + b"Connection: close\r\n\r\nGET /b HTTP/1.1\r\n\r\n")
    assert b'"/first"' in got and got.count(b"HTTP/1.1 ") == 1
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as s:
        s.sendall(request + b"\r\n")
        s.shutdown(socket.SHUT_WR)
        got = b""
        while chunk := s.recv(65536):
            got += chunk
    assert b'"/first"' in got


def test_an_answer_that_ends_with_the_connection_arrives_whole(gw):
    r = get(gw, "/identity")
    assert r.status_code == 200 and r.text == "until the end"


def test_a_websocket_the_gateway_cannot_hand_on_ends_its_connection():
    with serving(App) as app_port, socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        with gateway(app_port, unused.getsockname()[1]) as gw:
            got = raw(
                gw,
                b"GET /ws HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: "
                b"websocket\r\nSec-WebSocket-Key: x\r\nSec-WebSocket-Version: 13\r\n\r\n"
                % HOST.encode(),
                timeout=15,
            )
            assert got.startswith(b"HTTP/1.1 502") and b"connection: close" in got


def test_expect_100_continue_is_passed_on(gw):
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as s:
        s.sendall(
            b"POST /post HTTP/1.1\r\nHost: %s\r\nCookie: %s=good\r\nContent-Length: 5\r\n"
            b"Expect: 100-continue\r\n\r\n" % (HOST.encode(), gate.COOKIE_LAX.encode())
        )
        assert s.recv(4096).startswith(b"HTTP/1.1 100 Continue")
        s.sendall(b"hello")
        got = b""
        while b"X-Length" not in got and b"x-length" not in got:
            got += s.recv(4096)
        assert b"200" in got.split(b"\r\n")[0]


def test_behind_a_tls_proxy_the_app_is_told_https(settings):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")  # BEHIND_TLS_PROXY
    with serving(App) as app_port, serving(Web) as web_port, gateway(app_port, web_port) as gw:
        assert get(gw, "/h").json()["headers"]["x-forwarded-proto"] == "https"


# -- another site's requests to a private preview (previews.headers.refusal) -------------
