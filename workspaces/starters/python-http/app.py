"""A tiny web app using only the standard library."""

import json
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def greeting(name: str) -> str:
    return f"Hello, {name or 'world'}!"


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/api/hello":
            body = json.dumps({"message": greeting("")}).encode()
            content_type = "application/json"
        else:
            body = f"<!doctype html><title>Hello</title><h1>{greeting('')}</h1>".encode()
            content_type = "text/html; charset=utf-8"
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


if __name__ == "__main__":
    port = int(os.environ.get("PORT", "8000"))
    print(f"listening on 127.0.0.1:{port}", flush=True)
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
