"""Workspace secrets: an admin sets them, no door shows a value, a run gets one only by
name, and its log and changes show *** where the value was."""

import json

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from accounts.access import Actor
from accounts.models import Activity, ApiToken
from runs import actions as run_actions
from runs.models import Run, Secret
from runs.secrets import MAX_VALUE_BYTES, decrypt
from tests.support.api import bearer
from tests.support.runs import Agent, wait_for_output
from tests.support.secrets import API, VALUE, put

PAGE = "/t/team-a/w/notes/secrets/"


def error_of(response) -> dict:
    return response.json()["error"]


# -- the API -------------------------------------------------------------------------------


def test_an_admin_sets_a_secret_and_no_door_shows_its_value(client, cast, alice_api):
    r = put(client, alice_api, "API_KEY", {"value": VALUE})
    assert r.status_code == 200, r.content
    assert r.json()["name"] == "API_KEY" and VALUE not in r.content.decode()

    listing = client.get(API, **alice_api)
    assert listing.status_code == 200
    assert [s["name"] for s in listing.json()] == ["API_KEY"]
    assert listing.json()[0]["created_by"] == "alice"
    assert VALUE not in listing.content.decode()

    row = Secret.objects.get(workspace__slug="notes", name="API_KEY")
    assert VALUE not in row.ciphertext and decrypt(row.ciphertext) == VALUE
    activity = Activity.objects.get(verb="secret.set")
    assert activity.workspace == "notes" and activity.target == "secret:API_KEY"
    assert VALUE not in json.dumps(activity.detail)


def test_setting_a_name_again_replaces_its_value(client, cast, alice_api):
    put(client, alice_api, "API_KEY", {"value": VALUE})
    first = Secret.objects.get(name="API_KEY")
    r = put(client, alice_api, "API_KEY", {"value": "rotated-value-2"})
    assert r.status_code == 200
    row = Secret.objects.get(name="API_KEY")
    assert decrypt(row.ciphertext) == "rotated-value-2"
    assert row.created_at == first.created_at and row.updated_at > first.updated_at
    assert [s["name"] for s in client.get(API, **alice_api).json()] == ["API_KEY"]


def test_an_admin_deletes_a_secret(client, cast, alice_api):
    put(client, alice_api, "API_KEY", {"value": VALUE})
    assert client.delete(f"{API}/API_KEY", **alice_api).status_code == 204
    assert client.get(API, **alice_api).json() == []
    again = client.delete(f"{API}/API_KEY", **alice_api)
    assert again.status_code == 404 and error_of(again)["code"] == "not_found"
    assert Activity.objects.filter(verb="secret.deleted", target="secret:API_KEY").count() == 1


def test_a_member_may_list_names_but_not_manage_them(client, cast, alice_api):
    put(client, alice_api, "API_KEY", {"value": VALUE})
    _, secret = cast.token(cast.carol, ["workspace:read", "workspace:write", "run"])
    carol = bearer(secret)
    assert [s["name"] for s in client.get(API, **carol).json()] == ["API_KEY"]
    for r in (
        put(client, carol, "API_KEY", {"value": "mine"}),
        put(client, carol, "OTHER", {"value": "mine"}),
        client.delete(f"{API}/API_KEY", **carol),
    ):
        assert r.status_code == 403 and error_of(r)["code"] == "admin_required"
    assert decrypt(Secret.objects.get(name="API_KEY").ciphertext) == VALUE
    assert not Secret.objects.filter(name="OTHER").exists()


def test_an_admins_token_without_write_scope_cannot_set_one(client, cast, notes):
    _, secret = cast.token(cast.alice, ["workspace:read"])
    r = put(client, bearer(secret), "API_KEY", {"value": VALUE})
    assert r.status_code == 403 and error_of(r)["code"] == "missing_scope"
    assert not Secret.objects.exists()


def test_another_team_gets_404_for_everything(client, cast, alice_api):
    put(client, alice_api, "API_KEY", {"value": VALUE})
    _, secret = cast.token(cast.charlie)
    charlie = bearer(secret)
    for r in (
        client.get(API, **charlie),
        put(client, charlie, "API_KEY", {"value": "x"}),
        client.delete(f"{API}/API_KEY", **charlie),
    ):
        assert r.status_code == 404 and error_of(r)["code"] == "not_found"
    assert decrypt(Secret.objects.get(name="API_KEY").ciphertext) == VALUE


@pytest.mark.parametrize(
    "name, body, code",
    [
        ("API_KEY", {"value": VALUE, "mode": "plain"}, "invalid"),
        ("API_KEY", {}, "invalid"),
        ("api-key", {"value": VALUE}, "invalid"),
        ("9LIVES", {"value": VALUE}, "invalid"),
        ("API_KEY", {"value": ""}, "invalid"),
        ("API_KEY", {"value": "line one\nline two"}, "invalid"),
        ("API_KEY", {"value": "x" * (MAX_VALUE_BYTES + 1)}, "too_large"),
    ],
)
def test_bad_input_is_refused_with_422(client, cast, alice_api, name, body, code):
    r = put(client, alice_api, name, body)
    assert r.status_code == 422 and error_of(r)["code"] == code, r.content
    assert not Secret.objects.exists()


# -- the page ------------------------------------------------------------------------------


def test_alice_sets_and_deletes_a_secret_on_the_page(signed_in, cast, notes):
    alice = signed_in(cast.alice)
    settings_page = alice.get("/t/team-a/w/notes/settings/").content.decode()
    assert f'href="{PAGE}"' in settings_page
    page = alice.get(PAGE)
    assert page.status_code == 200 and 'type="password"' in page.content.decode()

    r = alice.post(PAGE, {"name": "API_KEY", "value": VALUE}, follow=True)
    assert r.redirect_chain == [(PAGE, 302)]
    html = r.content.decode()
    assert "Secret API_KEY is set" in html and "<code>API_KEY</code>" in html
    assert VALUE not in html
    assert decrypt(Secret.objects.get(name="API_KEY").ciphertext) == VALUE

    r = alice.post(f"{PAGE}API_KEY/delete/", follow=True)
    assert r.redirect_chain == [(PAGE, 302)] and "Deleted secret API_KEY" in r.content.decode()
    assert not Secret.objects.exists()


def test_a_bad_name_on_the_page_says_why_and_never_echoes_the_value(signed_in, cast, notes):
    r = signed_in(cast.alice).post(PAGE, {"name": "api key", "value": VALUE})
    assert r.status_code == 422
    html = r.content.decode()
    assert "is not a secret name" in html and VALUE not in html
    assert not Secret.objects.exists()


def test_the_page_needs_the_csrf_token(cast, notes):
    alice = Client(enforce_csrf_checks=True)
    alice.force_login(cast.alice)
    assert alice.post(PAGE, {"name": "API_KEY", "value": VALUE}).status_code == 403
    assert not Secret.objects.exists()


def test_carol_sees_the_names_but_cannot_set_or_delete(signed_in, cast, notes, client, alice_api):
    put(client, alice_api, "API_KEY", {"value": VALUE})
    carol = signed_in(cast.carol)
    html = carol.get(PAGE).content.decode()
    assert "<code>API_KEY</code>" in html and "Only an admin" in html
    assert 'type="password"' not in html and "/delete/" not in html
    r = carol.post(PAGE, {"name": "API_KEY", "value": "mine"})
    assert r.status_code == 403 and "Only an admin" in r.content.decode()
    assert carol.post(PAGE, {"name": "OTHER", "value": "mine"}).status_code == 403
    assert carol.post(f"{PAGE}API_KEY/delete/").status_code == 403
    assert decrypt(Secret.objects.get(name="API_KEY").ciphertext) == VALUE
    assert not Secret.objects.filter(name="OTHER").exists()


def test_charlie_gets_404_for_the_page(signed_in, cast, notes):
    charlie = signed_in(cast.charlie)
    assert charlie.get(PAGE).status_code == 404
    assert charlie.post(PAGE, {"name": "API_KEY", "value": VALUE}).status_code == 404


# -- token lists ---------------------------------------------------------------------------


def test_a_token_made_on_the_page_lists_the_secrets_it_may_grant(signed_in, cast):
    carol = signed_in(cast.carol)
    r = carol.post(
        "/t/team-a/tokens/",
        {
            "name": "deployer",
            "scopes": ["run"],
            "secret_names": "API_KEY, DB_URL",
            "expires_days": 7,
        },
    )
    assert r.status_code == 200
    assert ApiToken.objects.get(name="deployer").secret_names == ["API_KEY", "DB_URL"]
    assert "API_KEY, DB_URL" in carol.get("/t/team-a/tokens/").content.decode()

    r = carol.post(
        "/t/team-a/tokens/",
        {"name": "typo", "scopes": ["run"], "secret_names": "api-key", "expires_days": 7},
    )
    assert r.status_code == 422 and "is not a secret name" in r.content.decode()
    assert not ApiToken.objects.filter(name="typo").exists()


def test_create_token_takes_secret_names(cast):
    call_command(
        "create_token",
        team="team-a",
        user="carol",
        scopes="run",
        name="ci",
        secrets="API_KEY,DB_URL",
        secret=["API_KEY"],
    )
    assert ApiToken.objects.get(name="ci").secret_names == ["API_KEY", "DB_URL"]
    with pytest.raises(CommandError, match="is not a secret name"):
        call_command(
            "create_token",
            team="team-a",
            user="carol",
            scopes="run",
            name="bad",
            secrets="API_KEY,db url",
        )
    assert not ApiToken.objects.filter(name="bad").exists()


# -- granting secrets to runs --------------------------------------------------------------


def run_request(client, headers, **body):
    return client.post(
        "/api/v1/workspaces/notes/runs",
        {"command": "true", **body},
        content_type="application/json",
        **headers,
    )


def test_a_token_may_grant_only_the_names_on_its_list(client, cast, alice_api):
    put(client, alice_api, "API_KEY", {"value": VALUE})
    put(client, alice_api, "DB_URL", {"value": "postgres://db"})
    _, secret = cast.token(cast.carol, ["run"], secret_names=["DB_URL"])
    r = run_request(client, bearer(secret), secrets=["API_KEY", "DB_URL"])
    assert r.status_code == 403
    error = error_of(r)
    assert error["code"] == "secret_not_granted" and error["details"]["secrets"] == ["API_KEY"]
    assert "API_KEY" in error["message"]
    # An admin's token is held to its list just the same.
    r = run_request(client, alice_api, secrets=["API_KEY"])
    assert r.status_code == 403 and error_of(r)["code"] == "secret_not_granted"
    assert not Run.objects.exists()


def test_a_run_asking_for_an_unknown_secret_is_refused(client, cast, notes):
    _, secret = cast.token(cast.carol, ["run"], secret_names=["NOPE"])
    r = run_request(client, bearer(secret), secrets=["NOPE"])
    assert r.status_code == 422 and error_of(r)["code"] == "unknown_secret"
    assert error_of(r)["details"]["unknown"] == ["NOPE"]


def test_a_signed_in_person_may_grant_any_secret(client, cast, alice_api, notes):
    # No page or session door takes `secrets` yet (the runs form has no such field and
    # the API is token-only), so this goes through the action every door uses.
    put(client, alice_api, "API_KEY", {"value": VALUE})
    run = run_actions.start_run(notes, Actor(cast.carol), "true", secrets=["API_KEY"])
    assert run.secret_names == ["API_KEY"] and run.token is None


@pytest.mark.docker
def test_a_granted_secret_reaches_the_run_and_is_masked_everywhere(
    client, cast, alice_api, run_stack
):
    put(client, alice_api, "API_KEY", {"value": VALUE})
    _, secret = cast.token(cast.carol, ["workspace:read", "run"], secret_names=["API_KEY"])
    agent = Agent(client, secret)
    r = run_request(
        client,
        agent.headers,
        secrets=["API_KEY"],
        command='echo "key=$API_KEY"; printenv API_KEY | wc -c; echo "$API_KEY" > leaked.txt',
    )
    assert r.status_code == 202, r.content
    done = agent.wait(r.json())
    assert done["state"] == "succeeded", agent.output(done)
    # wc counts the value and printenv's newline: the whole value arrived.
    assert agent.output(done) == ["key=***", str(len(VALUE) + 1)]
    assert all(VALUE not in e["text"] for e in agent.log(done))
    assert done["secrets"] == ["API_KEY"] and done["env"] == []
    # A file holding the value is withheld, not stored: named with the secret it holds.
    assert done["changes"]["added"] == [] and VALUE not in done["changes"]["diff"]
    assert done["changes"]["withheld"] == [{"path": "leaked.txt", "secrets": ["API_KEY"]}]
    assert VALUE not in agent.get(f"/runs/{done['id']}").content.decode()
    assert VALUE not in json.dumps(list(Activity.objects.values("detail")))


@pytest.mark.docker
def test_a_secret_changed_during_a_run_stays_masked_with_the_value_the_run_got(
    client, cast, alice_api, run_stack
):
    """The run masks with the values sealed when it was placed, so rotating or
    deleting a secret mid-run never shows the old value in clear."""
    put(client, alice_api, "API_KEY", {"value": VALUE})
    _, secret = cast.token(cast.carol, ["workspace:read", "run"], secret_names=["API_KEY"])
    agent = Agent(client, secret)
    run = run_request(
        client,
        agent.headers,
        secrets=["API_KEY"],
        command='echo started; sleep 4; echo "late=$API_KEY"; echo "$API_KEY" > leaked.txt',
    ).json()
    assert wait_for_output(agent, run, "started")
    assert put(client, alice_api, "API_KEY", {"value": "rotated-value-2"}).status_code == 200
    assert client.delete(f"{API}/API_KEY", **alice_api).status_code == 204
    done = agent.wait(run, timeout=60)
    assert done["state"] == "succeeded", done
    assert "late=***" in agent.output(done)
    assert done["changes"]["withheld"] == [{"path": "leaked.txt", "secrets": ["API_KEY"]}]
    assert VALUE not in json.dumps(done)
