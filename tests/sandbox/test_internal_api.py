"""The web host's internal API (config.internal_api, docs/hosts.md "The internal API"),
through daphne: a host's token opens it and names the host, nothing else does (no
token, a user's API token, a forgotten host's), a host's token opens no door of the
public API, and its errors have the API's one shape. The runner's side, its agent
refusing a token the web host refuses, is tests/config/test_runner_keys.py."""

import pytest
import requests

from sandbox.hosts import Host
from sandbox.webapi import WebAPI, WebRefused


def get(server, path: str, token: str | None = None) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return requests.get(server.url + path, headers=headers, timeout=30)


def error_of(response: requests.Response) -> dict:
    assert response.headers["Content-Type"].startswith("application/json")
    return response.json()["error"]


def test_a_hosts_token_opens_the_internal_api_and_nothing_else_does(berth_server, cast):
    b = Host.objects.create(name="b")
    token = b.issue_token()
    answer = get(berth_server, "/internal/v1/host", token)
    assert answer.status_code == 200 and answer.json() == {"name": "b", "state": "ready"}
    # The runner's client, as its agent asks at start.
    assert WebAPI(berth_server.url, token).get("/host")["name"] == "b"

    refused = get(berth_server, "/internal/v1/host")
    assert refused.status_code == 401 and error_of(refused)["code"] == "unauthenticated"
    _, user_token = cast.token(cast.alice, ["workspace:read"])
    refused = get(berth_server, "/internal/v1/host", user_token)
    assert refused.status_code == 401 and error_of(refused)["code"] == "invalid_token"
    assert user_token not in refused.text
    # A host's token opens no door of the public API.
    public = get(berth_server, "/api/v1/workspaces", token)
    assert public.status_code == 401 and token not in public.text
    # A new token replaces the old; a forgotten host's opens nothing.
    again = b.issue_token()
    with pytest.raises(WebRefused) as refusal:
        WebAPI(berth_server.url, token).get("/host")
    assert (refusal.value.status, refusal.value.code) == (401, "invalid_token")
    b.delete()
    assert get(berth_server, "/internal/v1/host", again).status_code == 401


def test_the_internal_api_is_in_no_schema_and_answers_json_errors(berth_server):
    for path in ("/internal/v1/openapi.json", "/internal/v1/docs", "/internal/v1/nope"):
        answer = get(berth_server, path)
        assert answer.status_code in (401, 404), (path, answer.status_code)
        error_of(answer)
    schema = get(berth_server, "/api/v1/openapi.json").json()
    assert not any(path.startswith("/internal") for path in schema["paths"])


def test_the_web_hosts_own_processes_get_a_token_made_once_at_prepare(
    berth_server, cast, settings, tmp_path
):
    """`manage.py prepare` (keep_own_token) on one machine: its worker and agent reach
    the internal API as a runner host's do, with a token kept 0600 beside its keys,
    made once; a row that lost its digest (a restored database) is given it again."""
    from core import keys
    from sandbox.hosts import HostToken, keep_own_token

    settings.KEYS_DIR, settings.BERTH_HOST_TOKEN = tmp_path, ""
    assert keep_own_token() == cast.host
    path = tmp_path / keys.host_token_file("local")
    token = path.read_text()
    assert path.stat().st_mode & 0o777 == 0o600 and token.startswith("berth_host_")
    assert WebAPI(berth_server.url, token).get("/host") == {"name": "local", "state": "ready"}
    keep_own_token()
    assert path.read_text() == token  # made once
    HostToken.objects.filter(host=cast.host).delete()
    keep_own_token()
    assert WebAPI(berth_server.url, token).get("/host")["name"] == "local"
    # A runner host makes none: it is given its token.
    settings.BERTH_ROLE = "runner"
    with pytest.raises(keys.MissingKey):
        keys.own_host_token(lambda: "berth_host_x")
