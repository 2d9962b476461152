"""Links in answers: absolute under APP_URL (docs/security.md 38).

An agent reads a link in an API or MCP answer, a `git push`'s remote: lines or an
Activity row from wherever it runs, often with no idea of the origin the answer came
from (MCP names no base; a remote: line is plain text): only a full URL is one it can
follow. Berth keeps paths where it stores them (Activity), so changing APP_URL later
moves every link with it.
"""

from django.conf import settings


def absolute(path: str) -> str:
    """One of Berth's paths (`/t/…`, `/api/v1/…`) as a full URL under APP_URL; a URL
    that already names its host (a preview's, a release's) as it is."""
    if not path.startswith("/") or path.startswith("//"):
        return path
    return str(settings.APP_URL).rstrip("/") + path


def websocket(path: str) -> str:
    """One of Berth's WebSocket paths as a full URL under APP_URL (ws:// for an
    http:// APP_URL, wss:// for https://)."""
    base = str(settings.APP_URL).rstrip("/")
    scheme, _, rest = base.partition("://")
    return f"{'wss' if scheme == 'https' else 'ws'}://{rest}{path}"
