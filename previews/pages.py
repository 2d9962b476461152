"""The proxy's own answers on a preview host: typed pages when the app cannot answer.

HTML for browsers, the API's one error shape for `Accept: application/json`. Every
answer says what happened and what to do; none is cached.
"""

import json
from collections.abc import Mapping
from html import escape

from previews.gate import Target
from previews.models import FAILED_STATES, PreviewState

_TITLES: dict[str, str] = {
    PreviewState.STARTING: "This preview is starting…",
    PreviewState.FAILED: "This preview failed to start",
    PreviewState.STOPPED: "This preview is stopped",
    PreviewState.CRASHED: "This preview crashed",
}

_STYLE = (
    "body{font:15px/1.5 system-ui,sans-serif;max-width:46rem;margin:3rem auto;"
    "padding:0 1rem;color:#1d2433}pre{background:#f3f4f7;padding:.75rem;overflow:auto;"
    "font-size:13px}a.button{display:inline-block;padding:.35rem .9rem;border-radius:6px;"
    "background:#2f5bd3;color:#fff;text-decoration:none}.reason{color:#5a6372}"
)


def wants_json(headers: dict[bytes, bytes]) -> bool:
    accept = headers.get(b"accept", b"").decode("latin-1").lower()
    return "application/json" in accept and "text/html" not in accept


def answer(
    status: int,
    code: str,
    message: str,
    *,
    json_wanted: bool,
    title: str = "",
    detail: Mapping[str, object] | None = None,
    lines: list[str] | None = None,
    action: tuple[str, str] | None = None,
    refresh: bool = False,
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """(status, headers, body) of a typed answer. X-Berth-Error names its code, so a
    client that reads no body (or HTML) still tells Berth's answer from the app's."""
    headers = [
        (b"cache-control", b"no-store"),
        (b"x-content-type-options", b"nosniff"),
        (b"x-berth-error", code.encode()),
    ]
    if json_wanted:
        body = json.dumps(
            {"error": {"code": code, "message": message, "details": detail or {}}}
        ).encode()
        return status, [*headers, (b"content-type", b"application/json")], body
    parts = [
        f"<!doctype html><meta charset=utf-8><title>{escape(title or code)}</title>",
        f"<style>{_STYLE}</style>",
    ]
    if refresh:
        parts.append('<meta http-equiv="refresh" content="1">')
    parts.append(f"<h1>{escape(title or code)}</h1><p>{escape(message)}</p>")
    if detail and detail.get("reason"):
        parts.append(
            f'<p class="reason">reason: <code>{escape(str(detail["reason"]))}</code>'
            + (f", exit {detail['exit_code']}" if detail.get("exit_code") is not None else "")
            + "</p>"
        )
    if lines:
        parts.append("<p>The last lines of its log:</p><pre>" + escape("\n".join(lines)) + "</pre>")
    if action:
        parts.append(f'<p><a class="button" href="{escape(action[1])}">{escape(action[0])}</a></p>')
    return (
        status,
        [*headers, (b"content-type", b"text/html; charset=utf-8")],
        "".join(parts).encode(),
    )


def not_ready(
    t: Target, app_url: str, lines: list[str], json_wanted: bool
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    page = f"{app_url}/previews/{t.public_id}/"
    detail = {
        "state": t.state,
        "reason": t.reason or None,
        "exit_code": t.exit_code,
        "preview": t.public_id,
        "page": page,
    }
    if t.state == PreviewState.STARTING or (t.state == PreviewState.READY and t.ns is None):
        return answer(
            503,
            "preview_starting",
            "It will be up in a moment; this page reloads itself.",
            json_wanted=json_wanted,
            title=_TITLES[PreviewState.STARTING],
            detail=detail,
            refresh=True,
        )
    title = _TITLES.get(t.state, t.state)
    if t.reason == "idle":
        title = "This preview is stopped (idle)"
    elif t.state == PreviewState.CRASHED and t.exit_code is not None:
        title = f"This preview crashed: exit {t.exit_code}"
    return answer(
        503,
        f"preview_{t.state}",
        t.message or f"The preview is {t.state}.",
        json_wanted=json_wanted,
        title=title,
        detail=detail,
        lines=lines if t.state in FAILED_STATES else None,
        action=("Restart", page),
    )
