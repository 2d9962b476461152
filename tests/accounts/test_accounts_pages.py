"""Signing in, members, invitations, tokens and activity, through the pages."""

import re

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client

from accounts.models import ApiToken, Membership
from tests.support.api import bearer


def found(pattern: str, text: str) -> str:
    match = re.search(pattern, text)
    assert match, f"{pattern!r} not in page"
    return match.group(1)


def sign_in(client: Client, username: str, password: str):
    return client.post("/signin/", {"username": username, "password": password})


def test_alice_signs_in_and_lands_on_her_team(client, cast):
    r = sign_in(client, "alice", "alice-password-1")
    assert r.status_code == 302
    r = client.get("/", follow=True)
    assert r.redirect_chain[-1][0] == "/t/team-a/"
    assert "Team A" in r.content.decode()


def test_pages_need_a_signed_in_user(client, cast):
    r = client.get("/t/team-a/members/")
    assert r.status_code == 302 and r["Location"].startswith("/signin/")


def test_failed_sign_ins_are_throttled_even_for_the_right_password(client, cast, settings):
    settings.SIGNIN_MAX_FAILURES = 3
    for _ in range(3):
        r = sign_in(client, "bob", "wrong")
        assert r.status_code == 200 and "correct username and password" in r.content.decode()
    r = sign_in(client, "bob", "bob-password-1")
    assert r.status_code == 429
    assert "Too many failed sign-ins" in r.content.decode()
    assert "_auth_user_id" not in client.session


def test_a_successful_sign_in_resets_the_count(client, cast, settings):
    settings.SIGNIN_MAX_FAILURES = 3
    sign_in(client, "carol", "wrong")
    sign_in(client, "carol", "wrong")
    assert sign_in(client, "carol", "carol-password-1").status_code == 302
    client.logout()
    sign_in(client, "carol", "wrong")
    sign_in(client, "carol", "wrong")
    assert sign_in(client, "carol", "carol-password-1").status_code == 302


def test_charlie_gets_404_for_every_page_of_team_a(signed_in, cast):
    charlie = signed_in(cast.charlie)
    for path in ["/t/team-a/", "/t/team-a/activity/", "/t/team-a/members/", "/t/team-a/tokens/"]:
        assert charlie.get(path).status_code == 404, path
    assert (
        charlie.post("/t/team-a/members/new/", {"username": "x", "role": "admin"}).status_code
        == 404
    )
    assert not User.objects.filter(username="x").exists()


def test_admin_creates_a_user_with_a_generated_password_shown_once(signed_in, cast):
    alice = signed_in(cast.alice)
    r = alice.post("/t/team-a/members/new/", {"username": "dave", "role": "reviewer"}, follow=True)
    password = found(r"shown once: ([^<\s]+)", r.content.decode())
    assert Membership.objects.get(user__username="dave").role == "reviewer"
    assert sign_in(Client(), "dave", password).status_code == 302
    assert password not in alice.get("/t/team-a/members/").content.decode()


def test_a_member_cannot_manage_members(signed_in, cast):
    carol = signed_in(cast.carol)
    r = carol.post("/t/team-a/members/new/", {"username": "eve", "role": "admin"})
    assert r.status_code == 403
    assert carol.post("/t/team-a/members/bob/role/", {"role": "member"}).status_code == 403
    assert not User.objects.filter(username="eve").exists()
    assert Membership.objects.get(user=cast.bob).role == "reviewer"


def test_admin_changes_a_role_but_never_removes_the_last_admin(signed_in, cast):
    alice = signed_in(cast.alice)
    alice.post("/t/team-a/members/carol/role/", {"role": "reviewer"})
    assert Membership.objects.get(user=cast.carol).role == "reviewer"
    r = alice.post("/t/team-a/members/alice/role/", {"role": "member"}, follow=True)
    assert "at least one admin" in r.content.decode()
    assert Membership.objects.get(user=cast.alice, team=cast.team_a).role == "admin"


def test_an_invitation_link_works_once(signed_in, cast):
    alice = signed_in(cast.alice)
    r = alice.post("/t/team-a/invitations/", {"role": "reviewer", "note": "for erin"})
    link = found(r'value="(https?://[^"]+/invite/[^"]+)"', r.content.decode())
    path = link.removeprefix(settings.APP_URL)
    erin = Client()
    assert "Join Team A" in erin.get(path).content.decode()
    r = erin.post(path, {"username": "erin", "password": "erin-password-1"})
    assert r.status_code == 302 and r["Location"] == "/t/team-a/"
    assert Membership.objects.get(user__username="erin").role == "reviewer"
    assert erin.get("/t/team-a/activity/").status_code == 200
    again = Client().post(path, {"username": "mallory", "password": "mallory-password-1"})
    assert again.status_code == 404
    assert not User.objects.filter(username="mallory").exists()


def test_a_member_creates_a_token_that_is_shown_once_and_works(signed_in, client, cast):
    carol = signed_in(cast.carol)
    r = carol.post(
        "/t/team-a/tokens/",
        {
            "name": "laptop agent",
            "scopes": ["run", "preview"],
            "workspaces": "shop, blog",
            "expires_days": 7,
        },
    )
    assert r.status_code == 200 and r["Cache-Control"] == "no-store"
    secret = found(r'id="token-value" readonly value="(berth_[a-z0-9]+)"', r.content.decode())
    me = client.get("/api/v1/me", **bearer(secret)).json()
    assert me["scopes"] == ["preview", "run"] and me["workspaces"] == ["shop", "blog"]
    listing = carol.get("/t/team-a/tokens/").content.decode()
    assert "laptop agent" in listing and secret not in listing


def test_a_token_form_with_a_bad_workspace_slug_says_what_is_wrong(signed_in, cast):
    carol = signed_in(cast.carol)
    r = carol.post(
        "/t/team-a/tokens/",
        {"name": "x", "scopes": ["run"], "workspaces": "Bad Slug", "expires_days": 7},
    )
    assert r.status_code == 422
    assert "is not valid" in r.content.decode()
    assert not ApiToken.objects.filter(user=cast.carol).exists()


def test_members_see_and_revoke_only_their_own_tokens_admins_all(signed_in, cast):
    bob_token, _ = cast.token(cast.bob)
    cast.token(cast.carol)
    carol = signed_in(cast.carol)
    assert "bob agent" not in carol.get("/t/team-a/tokens/").content.decode()
    r = carol.post(f"/t/team-a/tokens/{bob_token.public_id}/revoke/")
    assert r.status_code == 404
    bob_token.refresh_from_db()
    assert bob_token.revoked_at is None
    alice = signed_in(cast.alice)
    page = alice.get("/t/team-a/tokens/").content.decode()
    assert "bob agent" in page and "carol agent" in page
    alice.post(f"/t/team-a/tokens/{bob_token.public_id}/revoke/")
    bob_token.refresh_from_db()
    assert bob_token.revoked_at is not None


def test_the_activity_page_says_who_did_what(signed_in, cast, client):
    token, _ = cast.token(cast.carol)
    alice = signed_in(cast.alice)
    alice.post(f"/t/team-a/tokens/{token.public_id}/revoke/")
    page = alice.get("/t/team-a/activity/").content.decode()
    # In words, each with its code kept on the cell (data-verb and title).
    for verb, words in [
        ("token.created", "created an API token"),
        ("token.revoked", "revoked an API token"),
        ("member.added", "added a member"),
    ]:
        assert f'data-verb="{verb}" title="{verb}">{words}</td>' in page
    assert "<code>token.revoked</code>" not in page
    revoked = cast.team_a.activity.get(verb="token.revoked")
    assert revoked.user == cast.alice and revoked.detail["owner"] == "carol"
    assert not cast.team_b.activity.filter(verb__startswith="token").exists()


@pytest.mark.parametrize("path", ["/signin/", "/t/team-a/activity/"])
def test_pages_send_safe_headers(signed_in, cast, path):
    r = signed_in(cast.alice).get(path)
    assert r["X-Frame-Options"] == "DENY"
    assert r["X-Content-Type-Options"] == "nosniff"
