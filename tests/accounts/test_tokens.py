"""API tokens: what an agent holding one can and cannot do."""

import logging
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from accounts import actions
from accounts.access import Actor
from accounts.models import ApiToken
from tests.support.api import assert_error, bearer


def test_it_tells_the_agent_who_it_is(client, cast):
    token, secret = cast.token(cast.carol, ["workspace:read", "run"], workspaces=["shop"])
    r = client.get("/api/v1/me", **bearer(secret))
    assert r.status_code == 200
    me = r.json()
    assert me["team"]["slug"] == "team-a"
    assert me["user"] == "carol"
    assert me["scopes"] == ["run", "workspace:read"]
    assert me["workspaces"] == ["shop"]
    assert me["token"] == token.public_id
    assert me["expires_at"].startswith(str(token.expires_at.date()))
    token.refresh_from_db()
    assert token.last_used_at is not None


def test_tokens_look_like_berth_tokens_and_are_stored_hashed(cast):
    token, secret = cast.token(cast.alice)
    assert secret.startswith("berth_")
    assert secret not in token.secret.digest
    row = ApiToken.objects.values().get(pk=token.pk)
    assert not any(secret in str(v) for v in row.values())


def test_it_refuses_a_request_without_a_token(client, cast):
    error = assert_error(client.get("/api/v1/me"), 401, "unauthenticated")
    assert "Bearer" in error["message"]


@pytest.mark.parametrize(
    "header",
    [
        "berth_abc",  # no scheme
        "Basic YWxpY2U6cGFzc3dvcmQ=",  # another scheme
        "Bearer",  # scheme without a token
        "Bearer ",
        "Bearer a b",  # two values
        "Bearer\tberth_x",
        "Token berth_abc",
    ],
)
def test_it_refuses_malformed_authorization_headers(client, cast, header):
    r = client.get("/api/v1/me", HTTP_AUTHORIZATION=header)
    assert r.status_code == 401
    assert r.json()["error"]["code"] in ("malformed_authorization", "invalid_token")


@pytest.mark.parametrize(
    "value",
    [
        "berth_" + "a" * 44,  # right shape, no such token
        "berth_short",
        "ghp_" + "a" * 36,  # someone else's token format
        "berth_" + "é" * 44,
    ],
)
def test_it_refuses_unknown_tokens(client, cast, value):
    assert_error(client.get("/api/v1/me", **bearer(value)), 401, "invalid_token")


def test_it_refuses_a_token_with_one_character_changed(client, cast):
    _, secret = cast.token(cast.carol)
    tampered = secret[:-1] + ("a" if secret[-1] != "a" else "b")
    assert_error(client.get("/api/v1/me", **bearer(tampered)), 401, "invalid_token")


def test_an_expired_token_stops_working(client, cast):
    token, secret = cast.token(cast.carol)
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert_error(client.get("/api/v1/me", **bearer(secret)), 401, "token_expired")


def test_a_revoked_token_stops_working_at_once(client, cast):
    token, secret = cast.token(cast.carol)
    assert client.get("/api/v1/me", **bearer(secret)).status_code == 200
    actions.revoke_token(token, Actor(cast.carol))
    assert_error(client.get("/api/v1/me", **bearer(secret)), 401, "token_revoked")


def test_a_token_stops_working_when_its_owner_leaves_the_team(client, cast):
    _, secret = cast.token(cast.carol)
    membership = cast.team_a.memberships.get(user=cast.carol)
    actions.remove_member(membership, Actor(cast.alice))
    r = client.get("/api/v1/me", **bearer(secret))
    assert r.status_code == 401


def test_the_token_value_never_appears_in_logs_or_later_responses(client, cast, caplog):
    caplog.set_level(logging.DEBUG)
    token, secret = cast.token(cast.carol)
    responses = [
        client.get("/api/v1/me", **bearer(secret)),
        client.get("/api/v1/nope", **bearer(secret)),
        client.post("/api/v1/me", **bearer(secret)),
    ]
    actions.revoke_token(token, Actor(cast.carol))
    responses.append(client.get("/api/v1/me", **bearer(secret)))
    for r in responses:
        assert secret not in r.content.decode()
    assert secret not in caplog.text
    body_part = secret.removeprefix("berth_")[12:]
    assert body_part not in caplog.text
    carol = client
    carol.force_login(cast.carol)
    page = carol.get("/t/team-a/tokens/").content.decode()
    assert token.name in page and body_part not in page
    assert all(body_part not in str(a.detail) for a in cast.team_a.activity.all())


def test_it_refuses_unknown_scopes(cast):
    with pytest.raises(CommandError, match="Unknown scope"):
        call_command("create_token", team="team-a", user="carol", scopes="run,root")
    assert not ApiToken.objects.filter(user=cast.carol).exists()


def test_create_token_prints_a_working_token_on_its_last_line(client, cast, capsys):
    call_command(
        "create_token",
        team="team-a",
        user="carol",
        scopes="run,workspace:read",
        workspace=["shop"],
        expires_days=7,
    )
    last_line = capsys.readouterr().out.strip().splitlines()[-1]
    assert last_line.startswith("berth_")
    me = client.get("/api/v1/me", **bearer(last_line)).json()
    assert me["user"] == "carol" and me["workspaces"] == ["shop"]
    expires = ApiToken.objects.get(user=cast.carol).expires_at
    assert timedelta(days=6) < expires - timezone.now() <= timedelta(days=7)


@pytest.mark.parametrize("days", [0, -1, 100_000])
def test_it_refuses_expiries_outside_the_allowed_range(cast, days):
    with pytest.raises(CommandError, match="expires after"):
        call_command("create_token", team="team-a", user="carol", scopes="run", expires_days=days)
