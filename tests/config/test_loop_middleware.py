"""Django's middleware with its hooks on daphne's loop (config.loop_middleware): under
ASGI, sign-in, CSRF, the session, messages and the security headers behave as Django's
own, and an API request goes through without a single hop of middleware to a thread."""

import re
from unittest import mock

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.test import AsyncClient
from django.utils import deprecation

from config import loop_middleware


def csrf_token(html: str) -> str:
    match = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)
    assert match, "no CSRF token in the page"
    return match.group(1)


def test_sign_in_csrf_session_and_messages_under_asgi(cast):
    client = AsyncClient(enforce_csrf_checks=True)

    async def story() -> None:
        page = await client.get("/signin/")
        assert page.status_code == 200
        assert "csrftoken" in page.cookies  # set by process_response, on the loop
        assert page["X-Frame-Options"] == "DENY"
        assert page["X-Content-Type-Options"] == "nosniff"
        token = csrf_token(page.content.decode())

        refused = await client.post(
            "/signin/", {"username": "alice", "password": "alice-password-1"}
        )
        assert refused.status_code == 403  # no token: CSRF still refuses

        signed = await client.post(
            "/signin/",
            {"username": "alice", "password": "alice-password-1", "csrfmiddlewaretoken": token},
        )
        assert signed.status_code == 302
        assert signed.cookies["sessionid"].value  # saved, in a thread

        members = await client.get("/t/team-a/members/")
        assert members.status_code == 200 and "alice" in members.content.decode()
        token = csrf_token(members.content.decode())
        changed = await client.post(
            "/t/team-a/policies/gvisor/", {"require_gvisor": "on", "csrfmiddlewaretoken": token}
        )
        assert changed.status_code == 302
        shown = await client.get(changed["Location"])
        assert "now uses gVisor" in shown.content.decode()  # stored, then shown once
        again = await client.get(changed["Location"])
        assert "now uses gVisor" not in again.content.decode()

    async_to_sync(story)()


@pytest.mark.django_db
def test_an_api_request_takes_no_middleware_hop(cast):
    _, secret = cast.token(cast.carol, ["workspace:read"])
    client = AsyncClient()
    hops = mock.Mock(wraps=sync_to_async)  # ours, and MiddlewareMixin's own

    async def ask() -> tuple[int, dict]:
        r = await client.get("/api/v1/me", headers={"Authorization": f"Bearer {secret}"})
        return r.status_code, dict(r.headers)

    with (
        mock.patch.object(loop_middleware, "sync_to_async", hops),
        mock.patch.object(deprecation, "sync_to_async", hops),
    ):
        status, headers = async_to_sync(ask)()
    assert status == 200
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert "sessionid" not in headers.get("Set-Cookie", "")
    hops.assert_not_called()  # no session to save, no messages to store
