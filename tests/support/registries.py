"""A local PEP 503 package index and npm registry on 127.0.0.1, with hand-built packages."""

import base64
import gzip
import hashlib
import html
import io
import json
import re
import tarfile
import tempfile
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

# Fixed timestamps keep the archives byte-identical across builds, so hashes are stable.
_ZIP_DATE = (2020, 1, 1, 0, 0, 0)
_TAR_MTIME = 1577836800


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode()


def build_wheel(dest_dir: Path, name: str = "berthdemo", version: str = "1.0") -> Path:
    """A pure-Python wheel with module `name` defining GREETING, assembled without setuptools."""
    dist = f"{re.sub(r'[-_.]+', '_', name)}-{version}"
    info = f"{dist}.dist-info"
    files = {
        f"{name}/__init__.py": f'GREETING = "hello from {name}"\n',
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: berth-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = "".join(
        f"{path},{_record_hash(text.encode())},{len(text.encode())}\n"
        for path, text in files.items()
    )
    files[f"{info}/RECORD"] = record + f"{info}/RECORD,,\n"
    wheel = dest_dir / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, text in files.items():
            zf.writestr(zipfile.ZipInfo(path, _ZIP_DATE), text, zipfile.ZIP_DEFLATED)
    return wheel


def build_npm_tarball(dest_dir: Path, name: str = "berth-demo", version: str = "1.0.0") -> Path:
    """An npm package tarball (members under package/) whose main module exports a greeting."""
    manifest = {"name": name, "version": version, "main": "index.js"}
    members = {
        "package/package.json": json.dumps(manifest, indent=2) + "\n",
        "package/index.js": f'module.exports = "hello from {name}";\n',
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path, text in members.items():
            data = text.encode()
            member = tarfile.TarInfo(path)
            member.size, member.mtime, member.mode = len(data), _TAR_MTIME, 0o644
            tar.addfile(member, io.BytesIO(data))
    tarball = dest_dir / f"{name}-{version}.tgz"
    tarball.write_bytes(gzip.compress(buf.getvalue(), mtime=0))
    return tarball


def _page(href: str, text: str) -> tuple[str, bytes]:
    body = f'<!DOCTYPE html><html><body><a href="{html.escape(href)}">{html.escape(text)}</a>'
    return "text/html; charset=utf-8", (body + "</body></html>\n").encode()


def normalise(project: str) -> str:
    """PEP 503: runs of -, _ and . are one dash, case-insensitively."""
    return re.sub(r"[-_.]+", "-", project).lower()


class Registry:
    """Serves berthdemo (PyPI simple API) and berth-demo (npm) until stopped."""

    def __init__(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            wheel, tarball = build_wheel(Path(tmp)), build_npm_tarball(Path(tmp))
            self.wheel_name, self.wheel = wheel.name, wheel.read_bytes()
            self.tarball_name, self.tarball = tarball.name, tarball.read_bytes()
        self.requests: list[str] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.02,), daemon=True
        )
        self._thread.start()

    def packument(self, host: str) -> dict[str, Any]:
        version = {
            "name": "berth-demo",
            "version": "1.0.0",
            "main": "index.js",
            "dist": {
                # The client may reach us by another name via a proxy; echo the name it used.
                "tarball": f"http://{host}/berth-demo/-/{self.tarball_name}",
                "shasum": hashlib.sha1(self.tarball).hexdigest(),
                "integrity": "sha512-"
                + base64.b64encode(hashlib.sha512(self.tarball).digest()).decode(),
            },
        }
        return {
            "name": "berth-demo",
            "dist-tags": {"latest": "1.0.0"},
            "versions": {"1.0.0": version},
        }

    def _route(self, path: str, host: str) -> tuple[str, bytes] | None:
        if path == "/simple/":
            return _page("berthdemo/", "berthdemo")
        if path.startswith("/simple/") and normalise(path[8:].strip("/")) == "berthdemo":
            sha256 = hashlib.sha256(self.wheel).hexdigest()
            return _page(f"/files/{self.wheel_name}#sha256={sha256}", self.wheel_name)
        if path == f"/files/{self.wheel_name}":
            return "application/octet-stream", self.wheel
        if path == "/berth-demo":
            return "application/json", json.dumps(self.packument(host)).encode()
        if path == f"/berth-demo/-/{self.tarball_name}":
            return "application/octet-stream", self.tarball
        return None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                with registry._lock:
                    registry.requests.append(path)
                host = self.headers.get("Host") or f"127.0.0.1:{registry.port}"
                found = registry._route(path, host)
                if found is None:
                    self.send_error(404)
                    return
                content_type, body = found
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # pytest shows stderr on failure; access logs would drown the real error

        return Handler

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def __enter__(self) -> "Registry":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
