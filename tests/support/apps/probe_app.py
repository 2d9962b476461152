"""A test app run inside a preview sandbox: it shows the proxy what reaches it.

Standard library only (the sandbox has no network to install anything). The tiny
WebSocket echo is test scaffolding, not Berth code: Berth's proxy speaks WebSocket
with the `websockets` library.
"""

import base64
import hashlib
import json
import os
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
NOTES: list[str] = []  # what reached /note, so a test can tell whether a request landed
# A page that keeps state the way apps do: a cookie it sets (partitioned, the kind a
# browser keeps in another site's frame) and localStorage; it shows what it found.
STORAGE_PAGE = b"""<!doctype html><title>storage</title><h1>storage</h1><p id=seen></p>
<script>
const seen = {cookie: document.cookie.includes("app=kept"),
              stored: localStorage.getItem("app")};
document.cookie = "app=kept; Path=/; Max-Age=3600; SameSite=None; Secure; Partitioned";
localStorage.setItem("app", "kept");
document.getElementById("seen").textContent = JSON.stringify(seen);
</script>"""


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        print(self.requestline, flush=True)

    def send(
        self,
        status: int,
        body: bytes,
        kind: str = "application/json",
        headers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        if path == "/headers":
            self.send(200, json.dumps({k.lower(): v for k, v in self.headers.items()}).encode())
        elif path == "/big":
            mb = int(self.path.split("mb=")[1]) if "mb=" in self.path else 50
            chunk = b"x" * (1 << 20)
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(mb << 20))
            self.end_headers()
            for _ in range(mb):
                self.wfile.write(chunk)
        elif path == "/cookies":
            self.send(
                200,
                b"{}",
                headers=(
                    ("Set-Cookie", "x=1; Domain=localhost; Path=/"),
                    ("Set-Cookie", "own=2; Path=/"),
                    ("Set-Cookie", "sessionid=evil; Path=/"),
                ),
            )
        elif path == "/redirect":
            self.send(302, b"", headers=(("Location", "http://169.254.169.254/latest/"),))
        elif path == "/ws":
            self.websocket()
        elif path == "/note":
            NOTES.append(f"GET {self.path.partition('?')[2]}")
            self.send(200, b"noted", "text/plain")
        elif path == "/notes":
            self.send(200, json.dumps(NOTES).encode())
        elif path == "/storage":
            self.send(200, STORAGE_PAGE, "text/html; charset=utf-8")
        elif path == "/health500":
            self.send(500, b"{}")
        else:
            self.send(
                200,
                b"<!doctype html><title>probe</title><h1>probe app</h1>",
                "text/html; charset=utf-8",
            )

    def do_POST(self) -> None:
        size = int(self.headers.get("Content-Length") or 0)
        data = self.rfile.read(size)
        if self.path == "/note":
            NOTES.append(f"POST {data.decode(errors='replace')}")
        self.send(
            200,
            hashlib.sha256(data).hexdigest().encode(),
            "text/plain",
            headers=(("X-Length", str(len(data))),),
        )

    def websocket(self) -> None:
        accept = base64.b64encode(
            hashlib.sha1((self.headers["Sec-WebSocket-Key"] + WS_GUID).encode()).digest()
        ).decode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.end_headers()
        while True:
            head = self.rfile.read(2)
            if len(head) < 2:
                return
            opcode, size = head[0] & 0x0F, head[1] & 0x7F
            if size == 126:
                size = struct.unpack(">H", self.rfile.read(2))[0]
            elif size == 127:
                size = struct.unpack(">Q", self.rfile.read(8))[0]
            mask = self.rfile.read(4)
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(self.rfile.read(size)))
            if opcode == 8:
                self.wfile.write(b"\x88\x02\x03\xe8")
                return
            reply = b"echo:" + data
            length = len(reply)
            header = bytes([0x80 | opcode]) + (
                bytes([length]) if length < 126 else b"\x7e" + struct.pack(">H", length)
            )
            self.wfile.write(header + reply)
            self.wfile.flush()


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "serve"
    port = int(os.environ.get("PORT", "8000"))
    if mode == "exit":
        print("probe app: giving up at once", flush=True)
        sys.exit(3)
    if mode == "silent":
        print("probe app: running, listening nowhere", flush=True)
        threading.Event().wait()
    if mode == "slow":
        # Listens only after a while: a request meanwhile is held by the proxy.
        print("probe app: starting slowly", flush=True)
        time.sleep(1)
    if mode == "second-port":
        # Something else listening in the same sandbox, which no preview URL may reach.
        other = ThreadingHTTPServer(("127.0.0.1", 9999), Handler)
        threading.Thread(target=other.serve_forever, daemon=True).start()
    print(f"probe app listening on 127.0.0.1:{port}", flush=True)
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
