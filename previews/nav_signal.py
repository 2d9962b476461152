"""A navigation of a viewer's preview frame, sent by the preview gateway to that
viewer's address bars (previews/navigations.py forwards it). Kept apart: the gateway
imports this, and nothing of the consumers."""

from core import fanout

MAX_PATH = 2000  # an address bar's worth; longer ones are cut, said with "…"


def group(preview_id: str, user_id: int) -> str:
    return f"preview_nav.{preview_id}.{user_id}"


def navigated(preview_id: str, user_id: int, target: bytes) -> None:
    """From the gateway: a navigation of this viewer's frame (never waits)."""
    path = target.decode("latin-1")
    if len(path) > MAX_PATH:
        path = path[:MAX_PATH] + "…"
    fanout.group_send(group(preview_id, user_id), {"type": "preview.navigated", "path": path})
