"""The preview gateway in this process, in front of stand-ins for a preview's app and
Berth's web process (the preview's namespace is this process's own)."""

import asyncio
import contextlib
import hashlib
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

import requests
from django.conf import settings

from previews import gate
from previews.gateway import Gateway
from previews.relay import Client
from sandbox.netns import Namespace

HOST = "abc123.preview.localhost"
COOKIE = {"Cookie": f"{gate.COOKIE_LAX}=good"}


release = threading.Event()


def _read_body(handler: BaseHTTPRequestHandler) -> bytes:
    if handler.headers.get("Transfer-Encoding") == "chunked":
        data = b""
        while size := int(handler.rfile.readline().strip(), 16):
            data += handler.rfile.read(size)
            handler.rfile.readline()
        handler.rfile.readline()
        return data
    return handler.rfile.read(int(handler.headers.get("Content-Length") or 0))


class App(BaseHTTPRequestHandler):
    """The preview's app."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def reply(self, body: bytes, *headers: tuple[str, str]) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "1234")
        self.end_headers()

    def do_GET(self) -> None:
        if self.path == "/chunked":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for part in (b"first ", b"second ", b"third"):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\n\r\n")
        elif self.path == "/hang-up":
            self.close_connection = True  # and no answer at all
        elif self.path == "/hold":
            release.wait(10)
            self.reply(b"held")
        elif self.path == "/slow":
            time.sleep(3)
            self.reply(b"late")
        elif self.path.startswith("/big"):
            size = int(self.path.split("kb=")[1]) * 1024
            self.send_response(200)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            # All but the last 50 KB at once, the rest a moment later.
            self.wfile.write(b"a" * (size - 50 * 1024))
            self.wfile.flush()
            time.sleep(0.3)
            self.wfile.write(b"b" * 50 * 1024)
        elif self.path.startswith("/framing"):
            query = parse_qs(self.path.partition("?")[2])
            self.reply(
                b"framing",
                *[
                    (name, query[key][0])
                    for key, name in (
                        ("xfo", "X-Frame-Options"),
                        ("csp", "Content-Security-Policy"),
                    )
                    if key in query
                ],
            )
        elif self.path == "/same":
            # The same bytes for the same request (no Date), in one write: an answer
            # the gateway sees again on a kept connection.
            body = json.dumps({k.lower(): v for k, v in self.headers.items()}).encode()
            self.wfile.write(
                b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nX-Frame-Options: DENY\r\n"
                b"Set-Cookie: own=1; Path=/\r\nSet-Cookie: x=1; Domain=localhost\r\n\r\n%s"
                % (len(body), body)
            )
        elif self.path == "/identity":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "identity")
            self.end_headers()
            self.wfile.write(b"until the end")
            self.close_connection = True
        else:
            self.reply(
                json.dumps(
                    {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}}
                ).encode(),
                ("Set-Cookie", "own=1; Path=/"),
                ("Set-Cookie", "x=1; Domain=localhost"),
            )

    def do_POST(self) -> None:
        if self.path == "/early":  # answers first, reads the body a second later
            self.reply(b"early")
            self.wfile.flush()
            time.sleep(1)
            _read_body(self)
            return
        data = _read_body(self)
        self.reply(hashlib.sha256(data).hexdigest().encode(), ("X-Length", str(len(data))))


class Web(App):
    """Berth's web process, as the gateway sees it: says what reached it."""

    def do_GET(self) -> None:
        self.reply(
            json.dumps(
                {"web": True, "headers": {k.lower(): v for k, v in self.headers.items()}}
            ).encode(),
            ("Set-Cookie", f"{gate.COOKIE_LAX}=set-by-berth; Path=/"),
        )


@contextmanager
def serving(handler: type) -> Iterator[int]:
    """The stand-in on a free port; its handlers end with it. A handler left blocked on a
    connection would outlive the test and run (and allocate) under later ones: a memory
    bound measured by tracemalloc counts every thread's allocations."""
    server = _Server(("127.0.0.1", 0), handler)
    # A short poll: shutdown() waits for the loop's next look (0.5 s by default, per test).
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        server.end_handlers()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.open: dict[socket.socket, threading.Thread] = {}

    def process_request(self, request, client_address) -> None:
        thread = threading.Thread(
            target=self.process_request_thread, args=(request, client_address), daemon=True
        )
        self.open[request] = thread
        thread.start()

    def handle_error(self, request, client_address) -> None:
        pass  # a client gone

    def end_handlers(self) -> None:
        release.set()  # a handler waiting for the test's word gets it
        for request, thread in list(self.open.items()):
            with contextlib.suppress(OSError):  # closed already
                request.shutdown(socket.SHUT_RDWR)  # a blocked read or write ends
            thread.join(5)


@contextmanager
def gateway(app_port: int, web_port: int, client: type = Client) -> Iterator[Gateway]:
    """A gateway on its own loop and thread, its caches saying: preview abc123 is ready
    on `app_port` in this process's namespace, and the cookie "good" may see it."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    gw = Gateway(("127.0.0.1", web_port))
    ns = Namespace(
        os.getpid(), os.stat(f"/proc/{os.getpid()}/ns/net").st_ino, settings.SANDBOX_HOST
    )
    target = gate.Target(1, "abc123", 1, "probe", "ready", "", "", None, False, app_port, ns, None)
    forever = time.monotonic() + 3600
    gw.lookups.targets["abc123"] = (forever, target)
    gw.lookups.viewers[("abc123", "good")] = (forever, True)
    gw.lookups.viewers[("abc123", "revoked")] = (forever, False)
    gw.lookups.touched[1] = forever  # no idle-clock writes: there is no preview row

    async def start() -> asyncio.Server:
        return await asyncio.get_running_loop().create_server(lambda: client(gw), "127.0.0.1", 0)

    server = asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    gw.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
    try:
        yield gw
    finally:
        loop.call_soon_threadsafe(server.close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def get(gw: Any, path: str, headers: dict | None = None, **kwargs) -> requests.Response:
    return requests.request(
        kwargs.pop("method", "GET"),
        f"http://127.0.0.1:{gw.port}{path}",
        headers={"Host": HOST, **COOKIE, **(headers or {})},
        allow_redirects=False,
        timeout=15,
        **kwargs,
    )


def raw(gw: Any, data: bytes, until: bytes = b"", timeout: float = 10) -> bytes:
    """Send `data` in one write; read until `until` appears or the gateway closes."""
    with socket.create_connection(("127.0.0.1", gw.port), timeout=timeout) as s:
        s.sendall(data)
        got = b""
        while not (until and until in got):
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        return got
