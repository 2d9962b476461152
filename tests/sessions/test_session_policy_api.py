"""A team's session maxima through the JSON API: every token of the team reads them,
an admin's sets them (typed refusals for anyone else, named bounds for bad values), and
sessions opened afterwards are held to them. No sandbox is started: a session's start
is only queued, and its task sent after a commit these tests never make."""

import pytest

from accounts.access import Actor
from accounts.models import Activity
from sessions.models import SessionPolicy
from tests.support.api import assert_error, bearer
from workspaces import actions as workspace_actions

URL = "/api/v1/session-policy"
SET = {
    "max_sessions": 2,
    "idle_freeze_s": 60,
    "idle_stop_s": 600,
    "lifetime_s": 3600,
    "retention_s": 86400,
}


@pytest.fixture
def tokens(cast) -> dict[str, dict[str, str]]:
    """Headers: alice (admin), carol (member), an admin's token without
    workspace:write, and charlie (team B's admin)."""
    write = ["workspace:read", "workspace:write", "run"]
    return {
        "alice": bearer(cast.token(cast.alice, write)[1]),
        "alice_reader": bearer(cast.token(cast.alice, ["workspace:read", "run"])[1]),
        "carol": bearer(cast.token(cast.carol, write)[1]),
        "charlie": bearer(cast.token(cast.charlie, write)[1]),
    }


def put(client, headers, body):
    return client.put(URL, body, content_type="application/json", **headers)


def test_every_token_of_the_team_reads_the_maxima_with_the_operators_ceilings(
    client, cast, tokens, settings
):
    r = client.get(URL, **tokens["carol"])
    assert r.status_code == 200, r.content
    assert r.json() == {
        "team": "team-a",
        "source": "defaults",
        "live_sessions": 0,
        **SessionPolicy.defaults(),
        "ceilings": {
            "max_sessions": settings.SESSION_CEILING_SESSIONS,
            "idle_freeze_s": settings.SESSION_CEILING_IDLE_S,
            "idle_stop_s": settings.SESSION_CEILING_IDLE_S,
            "lifetime_s": settings.SESSION_CEILING_LIFETIME_S,
            "retention_s": settings.SESSION_CEILING_RETENTION_S,
        },
    }
    assert_error(client.get(URL), 401, "unauthenticated")


def test_an_admin_sets_them_and_a_member_gets_a_typed_403(client, cast, tokens):
    r = put(client, tokens["alice"], SET)
    assert r.status_code == 200, r.content
    assert {k: r.json()[k] for k in SET} == SET and r.json()["source"] == "team"
    assert SessionPolicy.of(cast.team_a) == SET
    row = Activity.objects.get(verb="team.session_policy_changed")
    assert (row.user, row.detail["after"]) == (cast.alice, SET)
    assert client.get(URL, **tokens["carol"]).json()["max_sessions"] == 2

    error = assert_error(
        put(client, tokens["carol"], {**SET, "max_sessions": 9}), 403, "admin_required"
    )
    assert error["details"] == {"role": "member", "need": "admin"}
    error = assert_error(put(client, tokens["alice_reader"], SET), 403, "missing_scope")
    assert error["details"] == {"scope": "workspace:write"}
    assert SessionPolicy.of(cast.team_a)["max_sessions"] == 2


def test_another_team_neither_sees_nor_changes_them(client, cast, tokens):
    put(client, tokens["alice"], SET)
    # Team B's admin reads and sets team B's: never team A's.
    theirs = client.get(URL, **tokens["charlie"]).json()
    assert (
        theirs["team"] == "team-b"
        and theirs["max_sessions"] == SessionPolicy.defaults()["max_sessions"]
    )
    assert put(client, tokens["charlie"], {**SET, "max_sessions": 7}).json()["team"] == "team-b"
    assert SessionPolicy.of(cast.team_b)["max_sessions"] == 7
    assert SessionPolicy.of(cast.team_a)["max_sessions"] == 2


@pytest.mark.parametrize(
    ("body", "code", "where"),
    [
        ({**SET, "lifetime_s": 10**9}, "over_ceiling", "lifetime_s is at most 604800"),
        ({**SET, "max_sessions": 21}, "over_ceiling", "max_sessions is at most 20"),
        ({**SET, "idle_freeze_s": 0}, "invalid", "idle_freeze_s"),
        ({**SET, "retention_s": -1}, "invalid", "retention_s"),
        ({**SET, "max_sessions": "3"}, "invalid", "max_sessions"),
        ({**SET, "max_sessions": True}, "invalid", "max_sessions"),
        ({k: v for k, v in SET.items() if k != "idle_stop_s"}, "invalid", "idle_stop_s"),
        ({**SET, "max_execs": 3}, "invalid", "max_execs"),
    ],
)
def test_bad_values_are_refused_naming_the_field_and_its_bound(
    client, cast, tokens, body, code, where
):
    error = assert_error(put(client, tokens["alice"], body), 422, code)
    assert where in error["message"]
    if code == "over_ceiling":
        assert error["details"]["field"] == where.split()[0]
        assert error["details"]["maximum"] == int(where.split()[-1])
    assert not SessionPolicy.objects.exists()


def test_sessions_opened_afterwards_are_held_to_them(client, cast, tokens):
    workspace_actions.create_workspace(cast.team_a, Actor(cast.carol), "Shop", "shop")
    put(client, tokens["alice"], {**SET, "max_sessions": 1})
    sessions = "/api/v1/workspaces/shop/sessions"
    error = assert_error(
        client.post(
            sessions, {"lifetime_s": 7200}, content_type="application/json", **tokens["carol"]
        ),
        422,
        "over_team_maximum",
    )
    assert error["details"] == {"field": "lifetime_s", "maximum": 3600}
    r = client.post(sessions, {}, content_type="application/json", **tokens["carol"])
    assert r.status_code == 201, r.content
    assert r.json()["timers"] == {k: v for k, v in SET.items() if k != "max_sessions"}
    assert_error(
        client.post(sessions, {}, content_type="application/json", **tokens["carol"]),
        429,
        "session_limit",
    )
    usage = client.get("/api/v1/usage", **tokens["carol"]).json()
    assert usage["sessions"] == {"live": 1, "max_concurrent": 1}
    assert client.get(URL, **tokens["carol"]).json()["live_sessions"] == 1
