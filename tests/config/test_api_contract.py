"""The JSON API keeps its own contract: schemathesis, against the live schema of a real
daphne, sends every operation the schema's examples, its coverage cases and fuzzed
input, with a cast token (every scope, team A) and a seeded workspace, and every answer
must be one the schema declares: status, content type, headers and body
(tests/config/schemathesis.toml holds the checks, phases, seed and limits)."""

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import requests
from django.conf import settings

CONFIG = Path(__file__).with_name("schemathesis.toml")


def test_every_answer_of_the_api_is_one_its_schema_declares(berth_server, cast):
    # No run of team A is ever admitted: the fuzzer's commands are never executed, and
    # its runs answer the same whether a runner agent is up in this session or not.
    cast.team_a.max_concurrent_runs = 0
    cast.team_a.save(update_fields=["max_concurrent_runs"])
    _, secret = cast.token(cast.alice)
    seeded = seed(berth_server.url + "/api/v1", secret)
    # Kept with the servers' logs (the test DATA_DIR), to read after a failure.
    reports = settings.DATA_DIR / "schemathesis"
    shutil.rmtree(reports, ignore_errors=True)
    failures = run_schemathesis(berth_server.url, secret, seeded, reports)
    assert failures == [], f"{len(failures)} failures:\n\n" + "\n\n".join(failures)


def seed(api: str, secret: str) -> dict[str, str]:
    """What the operations' path parameters point at (tests/config/schemathesis.toml names
    them): the workspace `shop` with a run (cancelled: nothing waits on it), a preview,
    a deploy request and a deleted session with its ended exec, and the workspace
    `scratch` for the one delete of a workspace."""
    auth = {"Authorization": f"Bearer {secret}"}

    def call(method: str, path: str, body: dict | None, expected: int) -> dict:
        r = requests.request(method, api + path, json=body, headers=auth, timeout=60)
        assert r.status_code == expected, (method, path, r.status_code, r.text)
        return r.json()

    call("POST", "/workspaces", {"name": "Shop", "template": "python-http"}, 201)
    call("POST", "/workspaces", {"name": "Scratch"}, 201)
    run = call("POST", "/workspaces/shop/runs", {"command": "true"}, 202)
    call("POST", f"/runs/{run['id']}/cancel", None, 202)
    preview = call("POST", "/workspaces/shop/previews", {}, 202)
    deploy = call("POST", "/workspaces/shop/deploys", {"note": "contract"}, 201)
    # A deleted session with an exec that never ran: every exec or start asked of it is
    # refused at once, and a wait on the exec returns at once (nothing waits on a sandbox).
    session = call("POST", "/workspaces/shop/sessions", {}, 201)
    exec_row = call(
        "POST", f"/sessions/{session['id']}/exec", {"command": "true", "detach": True}, 202
    )
    call("DELETE", f"/sessions/{session['id']}", None, 202)
    return {
        "RUN": run["id"],
        "PREVIEW": preview["id"],
        "DEPLOY": deploy["id"],
        "SESSION": session["id"],
        "EXEC": exec_row["id"],
    }


def run_schemathesis(url: str, secret: str, seeded: dict[str, str], reports: Path) -> list[str]:
    """Run the CLI (one worker, a fixed seed: the same requests each time) and return
    one line per failure found, each with the operation and the check."""
    cmd = [
        str(Path(sys.executable).parent / "schemathesis"),
        "--config-file",
        str(CONFIG),
        "run",
        f"{url}/api/v1/openapi.json",
        "--header",
        f"Authorization: Bearer {secret}",
        "--report",
        "ndjson",
        "--report-dir",
        str(reports),
        "--no-color",
    ]
    # The reports' folder is its working folder too: what hypothesis keeps lands there.
    reports.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        cmd,
        cwd=reports,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, **{f"BERTH_SEEDED_{k}": v for k, v in seeded.items()}},
    )
    (reports / "output.txt").write_text(done.stdout + done.stderr)
    failures = _failures(reports)
    if done.returncode != 0 and not failures:
        raise AssertionError(f"schemathesis ended with {done.returncode}:\n{done.stdout[-5000:]}")
    return failures


def _failures(reports: Path) -> list[str]:
    """Each distinct failure of the NDJSON report (operation, check, what it saw), with
    the request that showed it and the first bytes of the answer."""
    found: dict[tuple[str, ...], str] = {}
    for report in reports.glob("*.ndjson"):
        for line in report.read_text().splitlines():
            event = json.loads(line).get("ScenarioFinished")
            if not event or event["status"] != "failure":
                continue
            recorder = event["recorder"]
            for case_id, checks in recorder.get("checks", {}).items():
                for check in checks:
                    if check["status"] != "failure":
                        continue
                    failure = check["failure_info"]["failure"]
                    key = (failure["operation"], check["name"], failure["message"])
                    if key in found:
                        continue
                    seen = recorder.get("interactions", {}).get(case_id, {})
                    request, response = seen.get("request", {}), seen.get("response") or {}
                    body = response.get("content") or {}
                    found[key] = (
                        f"{failure['operation']}: {check['name']} ({failure['code']}, "
                        f"{event['phase']}) {failure['message']}\n"
                        f"  {request.get('method')} {request.get('uri')} "
                        f"{_body(request.get('body'))}\n"
                        f"  -> {response.get('status_code')} {_body(body)}"
                    )
    return sorted(found.values())


def _body(content: dict | None) -> str:
    if not content:
        return ""
    raw = base64.b64decode(content["$base64"]) if "$base64" in content else b""
    return raw[:300].decode("utf-8", "replace")


# What the contract run found on PostgreSQL (SQLite neither enforces a column's length
# nor locks rows): each was a 500.


def test_a_branch_name_at_its_limit_is_created_and_deleted(client, cast):
    _, secret = cast.token(cast.alice)
    auth = {"HTTP_AUTHORIZATION": f"Bearer {secret}"}
    r = client.post("/api/v1/workspaces", {"name": "Shop"}, "application/json", **auth)
    assert r.status_code == 201, r.content
    name = "b" * 200  # the longest a branch may be; its Activity target is longer
    r = client.post("/api/v1/workspaces/shop/branches", {"name": name}, "application/json", **auth)
    assert r.status_code == 201, r.content
    r = client.delete(f"/api/v1/workspaces/shop/branches/{name}", **auth)
    assert r.status_code == 204, r.content


def test_a_preview_restarts_whether_or_not_it_has_a_process(client, cast):
    _, secret = cast.token(cast.alice)
    auth = {"HTTP_AUTHORIZATION": f"Bearer {secret}"}
    body = {"name": "Shop", "template": "python-http"}
    assert client.post("/api/v1/workspaces", body, "application/json", **auth).status_code == 201
    r = client.post("/api/v1/workspaces/shop/previews", {}, "application/json", **auth)
    assert r.status_code == 202, r.content
    # Locks the preview's row, not its run's (a nullable join PostgreSQL cannot lock).
    r = client.post(f"/api/v1/previews/{r.json()['id']}/restart", **auth)
    assert r.status_code == 202, r.content
    assert r.json()["restarts"] == 1
