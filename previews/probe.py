"""The health check of a preview's app, from inside its sandbox's network namespace
(sandbox.netns): one GET, its status read by llhttp. The runner agent's
watcher (previews.watch) asks it; serving requests is the preview gateway's alone.
"""

import asyncio
import contextlib

import httptools

from sandbox.netns import Namespace, connect


class _Status:
    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.status: int | None = None

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if status >= 200:  # an interim answer (100, 103) is not the answer
            self.status = status


async def probe(ns: Namespace, port: int, host: str, path: str, timeout: float = 2.0) -> int | None:
    """GET `path` inside the sandbox: the status, 0 if something accepted the
    connection but gave no HTTP answer, None if nothing listens on the port."""
    try:
        sock = await connect(ns, port, timeout)
        reader, writer = await asyncio.wait_for(asyncio.open_connection(sock=sock), timeout)
    except (OSError, TimeoutError):
        return None
    try:
        # HTTP/1.0, which no viewer's request is (the gateway forwards them as 1.1): an
        # app's access log tells a health check apart, and the log views count those
        # instead of showing them (static/js/runs.js).
        writer.write(
            f"GET {path} HTTP/1.0\r\nHost: {host}\r\nUser-Agent: berth-health-check\r\n"
            "Connection: close\r\n\r\n".encode("latin-1")
        )
        answer = _Status()
        async with asyncio.timeout(timeout):
            while answer.status is None:
                data = await reader.read(65536)
                if not data:
                    return 0
                answer.parser.feed_data(data)
        return answer.status
    except (OSError, TimeoutError, httptools.HttpParserError, UnicodeEncodeError):
        return 0
    finally:
        with contextlib.suppress(Exception):
            writer.close()
