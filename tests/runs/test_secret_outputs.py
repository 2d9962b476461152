"""What a run granted secrets gives back. Its outputs — log, changed files, tree, diff,
artifacts, committing them — go only to actors who could have granted every one of its
secrets; to anyone else the run does not exist (a script can write a value base64'd,
which no masking catches). A file or artifact holding a granted value literally is
found while it streams, across chunk boundaries, and withheld: never stored as a blob,
never written to the data directory, named with the secret it holds."""

import base64
import json

import pytest
from asgiref.sync import async_to_sync

from accounts.access import Actor
from runs import artifacts
from runs.models import Run
from tests.support.api import bearer
from tests.support.logs import closed_with
from tests.support.logs import connect as watch
from tests.support.mcp import connect as mcp
from tests.support.runs import Agent
from tests.support.secrets import VALUE, put
from workspaces import actions as workspace_actions
from workspaces.changes import Change
from workspaces.store import open_store

TOML = '[artifacts]\npaths = ["dist/"]\n'
# The value once in a plain file, once across the reader's 64 kB chunk boundary in an
# artifact, once base64'd (only the access rule stops that), and once in a file name.
COMMAND = (
    'echo "$API_KEY" > leaked.txt; mkdir -p dist; echo fine > dist/ok.txt; '
    'head -c 65530 /dev/zero > dist/big.bin; printf %s "$API_KEY" >> dist/big.bin; '
    'printf %s "$API_KEY" | base64 > encoded.txt; touch "name-$API_KEY.txt"; '
    'echo kept > notes.txt; echo "log: $API_KEY"'
)


class NotesAgent(Agent):
    def run(self, command: str, **body) -> dict:
        r = self.client.post(
            "/api/v1/workspaces/notes/runs",
            {"command": command, **body},
            content_type="application/json",
            **self.headers,
        )
        assert r.status_code == 202, r.content
        return r.json()


def stored_objects_hold(workspace, value: bytes) -> bool:
    with open_store(workspace) as store:
        objects = store.repo.object_store
        return any(value in objects.get_raw(sha)[1] for sha in objects)


@pytest.mark.docker
@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
def test_a_runs_secret_outputs_are_withheld_and_served_only_to_who_could_grant_them(
    client, cast, notes, alice_api, run_stack, berth_server, runtime
):
    put(client, alice_api, "API_KEY", {"value": VALUE})
    workspace_actions.commit_changes(
        notes, Actor(cast.alice), [Change("write", "workspace.toml", TOML.encode())], "artifacts"
    )
    _, granter = cast.token(
        cast.carol, ["workspace:read", "workspace:write", "run"], secret_names=["API_KEY"]
    )
    agent = NotesAgent(client, granter)
    done = agent.wait(agent.run(COMMAND, secrets=["API_KEY"], runtime=runtime))
    assert done["state"] == "succeeded", done
    changes = done["changes"]
    withheld = {w["path"]: w["secrets"] for w in changes["withheld"]}
    assert withheld == {
        "leaked.txt": ["API_KEY"],
        "dist/big.bin": ["API_KEY"],
        "name-***.txt": ["API_KEY"],
    }
    assert set(changes["added"]) == {"dist/ok.txt", "encoded.txt", "notes.txt"}
    refused = {a["path"]: a["why"] for a in done["artifacts_refused"]}
    assert "API_KEY" in refused["dist/big.bin"]
    assert [a["path"] for a in done["artifacts"]] == ["dist/ok.txt"]
    # Nothing holding the value reached the artifact store or the object store.
    assert not artifacts.storage().exists(f"{artifacts.folder_of(done['id'])}/dist/big.bin")
    assert not stored_objects_hold(notes, VALUE.encode())
    assert VALUE not in json.dumps(done)

    # Committing says what was withheld; the granter's token may.
    r = client.post(f"/api/v1/runs/{done['id']}/commit-changes", **bearer(granter))
    assert r.status_code == 200, r.content
    sha = r.json()["changes_commit"]["sha"]
    detail = agent.get(f"/workspaces/notes/commits/{sha}").json()
    assert "Withheld" in detail["message"] and "leaked.txt (API_KEY)" in detail["message"]
    assert not stored_objects_hold(notes, VALUE.encode())
    # What the access rule cannot do, said plainly in docs/security.md: once committed,
    # an encoded value is the workspace's, readable by any token that reads it.
    _, reader = cast.token(cast.carol, ["workspace:read"])
    encoded = client.get(
        f"/api/v1/workspaces/notes/files/encoded.txt?ref={sha}", **bearer(reader)
    ).json()["content"]
    assert base64.b64decode(encoded.strip()).decode() == VALUE

    # A token of the same team and scopes that may not grant API_KEY: no such run.
    _, other = cast.token(cast.carol, ["workspace:read", "workspace:write", "run"])
    for path in (
        f"/runs/{done['id']}",
        f"/runs/{done['id']}/logs",
        f"/runs/{done['id']}/artifacts",
        f"/runs/{done['id']}/artifacts/dist/ok.txt",
        f"/runs/{done['id']}/egress",
    ):
        r = client.get(f"/api/v1{path}", **bearer(other))
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", path
    for verb in ("rerun", "commit-changes", "cancel"):
        r = client.post(
            f"/api/v1/runs/{done['id']}/{verb}",
            {},
            content_type="application/json",
            **bearer(other),
        )
        assert r.status_code == 404, (verb, r.content)
    listed = client.get("/api/v1/workspaces/notes/runs", **bearer(other)).json()
    assert done["id"] not in [r["id"] for r in listed]
    assert done["id"] in [r["id"] for r in agent.get("/workspaces/notes/runs").json()]

    run = Run.objects.get(public_id=done["id"])

    async def refused() -> None:
        ws = await watch(run, secret=other)
        assert await closed_with(ws) == 4404
        await ws.disconnect()

    async_to_sync(refused)()

    async def body(agent) -> None:
        for tool in ("get_run", "read_run_log"):
            error = await agent.error(tool, run_id=done["id"])
            assert error["code"] == "not_found", (tool, error)

    mcp(berth_server, other, body)

    # The encoded value came back only to the granter, through the log and the diff.
    encoded = base64.b64encode(VALUE.encode()).decode()
    assert encoded in agent.get(f"/runs/{done['id']}").json()["changes"]["diff"]
