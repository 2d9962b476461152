"""A session's terminal through its WebSocket on the real daphne, as the page's script
talks to it (static/js/terminal.js)."""

import base64
import json
import time

from websockets.sync.client import ClientConnection, connect

from tests.support.servers import Server


def open_socket(server: Server, term_id: str, secret: str, after: int = 0) -> ClientConnection:
    ws = connect(
        f"ws://127.0.0.1:{server.port}/ws/terminals/{term_id}?after={after}",
        additional_headers={"Authorization": f"Bearer {secret}", "Origin": server.url},
        open_timeout=10,
    )
    return ws


class Screen:
    """What a terminal socket said: its output as text, and how far it got (`end`)."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.text = ""
        self.end = 0
        self.messages: list[dict] = []

    def read_until(self, want, timeout: float = 30) -> dict | None:
        """Messages until `want(message)` or `want` (a string) is on the screen."""
        deadline = time.monotonic() + timeout
        while True:
            if isinstance(want, str) and want in self.text:
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(
                    f"timed out waiting for {want!r}; screen ends {self.text[-400:]!r}, "
                    f"last messages {self.messages[-3:]}"
                )
            try:
                message = json.loads(self.ws.recv(timeout=left))
            except TimeoutError:
                continue
            self.messages.append(message)
            if message["type"] == "output":
                self.text += base64.b64decode(message["data"]).decode(errors="replace")
                self.end = message["end"]
            if callable(want) and want(message):
                return message

    def read_prompt(self, timeout: float = 30) -> None:
        """Until the shell waits at its prompt. Typed ahead of it, a line's echo depends on
        the runtime's line discipline (gVisor's may not echo input the shell reads later);
        typed at the prompt, readline echoes it itself."""
        if not self.text.endswith("$ "):
            self.read_until(lambda m: self.text.endswith("$ "), timeout)

    def type(self, text: str) -> None:
        self.ws.send(json.dumps({"type": "input", "data": text}))
