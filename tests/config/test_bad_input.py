"""Bad input gets a clear 4xx in the one error shape, never a 500."""

import json
import urllib.error
import urllib.request

import pytest

from tests.support.api import assert_error, bearer

TWENTY_MB = 20 * 1024 * 1024


def http(method: str, url: str, body: bytes | None = None, headers: dict | None = None):
    """(status, parsed JSON body) from a real HTTP request."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def test_a_20_mb_body_is_refused_with_too_large(client, cast):
    _, secret = cast.token(cast.carol)
    r = client.generic("POST", "/api/v1/me", b"x" * TWENTY_MB, "application/json", **bearer(secret))
    error = assert_error(r, 413, "too_large")
    assert "16 MB" in error["message"]


def test_a_20_mb_body_through_daphne_is_refused_and_the_server_lives_on(berth_server, cast):
    _, secret = cast.token(cast.carol)
    auth = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}
    status, body = http("POST", f"{berth_server.url}/api/v1/me", b"x" * TWENTY_MB, auth)
    assert status == 413
    assert body["error"]["code"] == "too_large"
    status, body = http("GET", f"{berth_server.url}/api/v1/me", headers=auth)
    assert status == 200 and body["user"] == "carol"


@pytest.mark.parametrize(
    "header",
    ["Bearer", "Bearer  berth_", "bearer berth_x y", "Bearer " + "A" * 10_000, "\u00e9\u00e9"],
)
def test_malformed_headers_through_daphne_get_401_with_the_error_shape(berth_server, cast, header):
    status, body = http("GET", f"{berth_server.url}/api/v1/me", headers={"Authorization": header})
    assert status == 401
    assert body["error"]["code"] in ("malformed_authorization", "invalid_token")


def test_a_bad_content_length_is_a_400_not_a_500(client, cast):
    r = client.get("/api/v1/me", CONTENT_LENGTH="lots")
    assert_error(r, 400, "bad_request")


def test_unknown_api_paths_and_methods_answer_in_the_error_shape(client, cast):
    _, secret = cast.token(cast.carol)
    assert_error(client.get("/api/v1/no/such/thing", **bearer(secret)), 404, "not_found")
    r = client.delete("/api/v1/me", **bearer(secret))
    error = assert_error(r, 405, "method_not_allowed")
    assert "GET" in error["message"] and r["Allow"] == "GET"


def test_the_openapi_schema_and_docs_are_served_without_a_cdn(client, db):
    schema = client.get("/api/v1/openapi.json").json()
    assert "/api/v1/me" in schema["paths"]
    assert schema["components"]["securitySchemes"]["TokenAuth"]["scheme"] == "bearer"
    docs = client.get("/api/v1/docs").content.decode()
    assert "/static/ninja/swagger-ui" in docs and "cdn." not in docs
