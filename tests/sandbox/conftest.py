"""The egress tests' host-local file server."""

import http.server
import threading
from collections.abc import Iterator

import pytest

from tests.support.egress import Files


@pytest.fixture
def files() -> Iterator[int]:
    """A host-local HTTP server on 127.0.0.1: sandboxes reach it as files.test:<port>."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Files)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    thread.join()
