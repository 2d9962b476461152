"""The address that opens a private preview: its host's ticket path, with a fresh
single-use ticket (previews.gate redeems it)."""

from datetime import datetime, timedelta
from urllib.parse import quote

from django.conf import settings
from django.utils import timezone

from accounts.access import Actor
from previews import gate, viewers
from previews.models import Preview


def ticket_url(
    preview: Preview, actor: Actor, port: str, next_path: str = "/"
) -> tuple[str, datetime]:
    if not next_path.startswith("/") or next_path.startswith("//"):
        next_path = "/"
    nonce = viewers.issue_ticket(preview, actor)
    url = (
        preview.url(port).rstrip("/")
        + gate.TICKET_PATH
        + f"?t={nonce}&next={quote(next_path, safe='')}"
    )
    return url, timezone.now() + timedelta(seconds=settings.PREVIEW_TICKET_S)
