"""What a run gives back: the dependency cache, changed files, artifacts, masked
secrets and exact replays — through the API, on the real stack."""

import hashlib

import pytest

from accounts.access import Actor
from runs.models import Run, Secret
from runs.secrets import encrypt
from sandbox.engine import engine
from tests.support.api import bearer
from tests.support.runs import Agent
from tests.support.servers import wait_for
from workspaces import actions as workspace_actions
from workspaces.changes import Change

pytestmark = pytest.mark.docker


@pytest.fixture
def shop(cast):
    return workspace_actions.create_workspace(
        cast.team_a, Actor(cast.carol), "Shop", "shop", "python-http"
    )


@pytest.fixture
def agent(client, cast, shop, run_stack):
    _, secret = cast.token(
        cast.carol, ["workspace:read", "workspace:write", "run"], secret_names=["API_KEY"]
    )
    return Agent(client, secret)


def commit(shop, cast, files: dict[str, str], message="edit") -> str:
    changes = [Change("write", path, text.encode()) for path, text in files.items()]
    # By the admin, signed in: a contract she writes is approved (workspaces.reviews).
    return workspace_actions.commit_changes(shop, Actor(cast.alice), changes, message).sha


TOML_WITH_ARTIFACTS = """
[sandbox]
memory_mb = 256
[artifacts]
paths = ["dist/", "link", "fifo", "big.bin", "missing.txt"]
"""


def test_the_python_template_fills_its_venv_cache_once_and_runs_read_only_on_it(agent, shop, cast):
    first = agent.wait(agent.run("/deps/venv/bin/python -c 'print(\"from the venv\")'"))
    assert first["state"] == "succeeded", first
    assert first["setup"]["skipped"] is False and first["setup"]["cache"]
    assert first["timings"]["setup_done_at"] > first["timings"]["hydrated_at"]
    assert "from the venv" in agent.output(first)

    second = agent.wait(agent.run("touch /deps/venv/poisoned"))
    assert second["setup"]["skipped"] is True
    assert second["setup"]["key"] == first["setup"]["key"]
    # Skipped: setup took no time, the command started right after hydration.
    assert second["timings"]["setup_done_at"] == second["timings"]["hydrated_at"]
    assert second["state"] == "failed"
    assert "Read-only file system" in "\n".join(agent.output(second))

    commit(shop, cast, {"requirements.txt": "# now with a comment that changes the hash\n"})
    third = agent.wait(agent.run("test ! -e /deps/venv/poisoned && echo clean"))
    assert third["setup"]["skipped"] is False
    assert third["setup"]["key"] != first["setup"]["key"]
    assert third["state"] == "succeeded" and "clean" in agent.output(third)


def test_a_failing_setup_fails_the_run_before_the_command_and_caches_nothing(agent, shop, cast):
    commit(shop, cast, {"workspace.toml": '[setup]\ncommand = "echo installing; exit 4"\n'})
    done = agent.wait(agent.run("echo never"))
    assert (done["state"], done["reason"], done["exit_code"]) == ("failed", "setup_failed", 4)
    assert "[setup]" in done["message"]
    output = agent.output(done)
    assert "installing" in output and "never" not in output
    owned = {"label": f"berth.owner={done['id']}"}
    # Neither container, nor /workspace, nor the unfinished /deps survive the run.
    assert wait_for(
        lambda: (
            not engine().volumes.list(filters=owned)
            and not engine().api.containers(all=True, filters=owned)
        )
    )


def test_changed_files_are_reported_with_a_diff_and_gitignored_files_left_out(agent):
    done = agent.wait(
        agent.run(
            "sed -i 's/Hello/Howdy/' app.py && echo new > notes.txt && rm README.md"
            " && python3 -m unittest -q 2>/dev/null;"
            " mkdir -p __pycache__ && echo x > __pycache__/a.pyc"
        )
    )
    changes = done["changes"]
    assert changes["modified"] == ["app.py"]
    assert changes["added"] == ["notes.txt"]
    assert changes["deleted"] == ["README.md"]
    assert "-    return f\"Hello, {name or 'world'}!\"" in changes["diff"]
    assert "+    return f\"Howdy, {name or 'world'}!\"" in changes["diff"]
    assert "__pycache__" not in str(changes)
    assert done["changes_commit"] is None  # reported, not committed unless asked


def test_commit_changes_puts_a_formatters_rewrite_on_a_runs_branch(agent, shop):
    done = agent.wait(agent.run("sed -i 's/Hello/Howdy/' app.py", commit_changes=True))
    assert done["state"] == "succeeded", (done["reason"], done["message"])
    committed = done["changes_commit"]
    assert committed["branch"] == f"runs/{done['id']}"
    branches = {b["name"] for b in agent.get("/workspaces/shop/branches").json()}
    assert committed["branch"] in branches
    detail = agent.get(f"/workspaces/shop/commits/{committed['sha']}").json()
    assert detail["parents"] == [done["commit"]]
    assert f"run {done['id']}" in detail["author"]["name"]
    assert [f["path"] for f in detail["diff"]["files"]] == ["app.py"]
    assert '+    return f"Howdy' in detail["diff"]["files"][0]["patch"]


def test_the_changes_of_a_finished_run_can_be_committed_afterwards_once(
    agent, shop, cast, signed_in
):
    done = agent.wait(agent.run("sed -i 's/Hello/Howdy/' app.py"))
    assert done["state"] == "succeeded" and done["changes_commit"] is None
    page = signed_in(cast.carol).get(f"/t/team-a/w/shop/runs/{done['id']}/").content.decode()
    assert "Commit these changes" in page
    # A token needs workspace:write for it; carol's agent has it.
    r = agent.client.post(f"/api/v1/runs/{done['id']}/commit-changes", **agent.headers)
    assert r.status_code == 200, r.content
    committed = r.json()["changes_commit"]
    assert committed["branch"] == f"runs/{done['id']}"
    detail = agent.get(f"/workspaces/shop/commits/{committed['sha']}").json()
    assert detail["parents"] == [done["commit"]]
    assert '+    return f"Howdy' in detail["diff"]["files"][0]["patch"]
    again = agent.client.post(f"/api/v1/runs/{done['id']}/commit-changes", **agent.headers)
    assert again.status_code == 409 and again.json()["error"]["code"] == "already_committed"
    nothing = agent.wait(agent.run("true"))
    r = agent.client.post(f"/api/v1/runs/{nothing['id']}/commit-changes", **agent.headers)
    assert r.status_code == 409 and r.json()["error"]["code"] == "no_changes"


def test_artifacts_are_kept_byte_for_byte_and_links_fifos_and_oversize_refused(agent, shop, cast):
    commit(shop, cast, {"workspace.toml": TOML_WITH_ARTIFACTS})
    done = agent.wait(
        agent.run(
            "mkdir -p dist/sub && printf 'hello artifact' > dist/a.txt"
            " && head -c 300000 /dev/urandom > dist/sub/b.bin && sha256sum dist/sub/b.bin"
            " && ln -s /etc/passwd link && mkfifo fifo && head -c 6000000 /dev/zero > big.bin"
        )
    )
    assert done["state"] == "succeeded", done
    kept = {a["path"]: a for a in done["artifacts"]}
    assert set(kept) == {"dist/a.txt", "dist/sub/b.bin"}
    r = agent.get(f"/runs/{done['id']}/artifacts/dist/a.txt")
    assert r.status_code == 200 and b"".join(r) == b"hello artifact"
    blob = b"".join(agent.get(f"/runs/{done['id']}/artifacts/dist/sub/b.bin"))
    assert hashlib.sha256(blob).hexdigest() == kept["dist/sub/b.bin"]["sha256"]
    assert kept["dist/sub/b.bin"]["sha256"] in "\n".join(agent.output(done))
    refused = {r["path"]: r["why"] for r in done["artifacts_refused"]}
    assert "symlink" in refused["link"] and "FIFO" in refused["fifo"]
    assert "cap" in refused["big.bin"] and "RUN_ARTIFACTS_MAX_MB" in refused["big.bin"]
    assert "no such file" in refused["missing.txt"]
    listing = agent.get(f"/runs/{done['id']}/artifacts").json()
    assert {a["path"] for a in listing["artifacts"]} == set(kept)
    # Only what the run kept can be read: never a path a request makes up.
    for path in ("link", "../../secrets.key", "dist"):
        r = agent.get(f"/runs/{done['id']}/artifacts/{path}")
        assert r.status_code == 404 and r.json()["error"]["code"] == "artifact_not_found"


def test_a_file_holding_a_granted_secret_is_withheld_from_the_changes(agent, shop, cast):
    Secret.objects.create(workspace=shop, name="API_KEY", ciphertext=encrypt("s3cr3t-value-42"))
    done = agent.wait(
        agent.run('echo "token=$API_KEY" > out.txt; echo plain > other.txt', secrets=["API_KEY"])
    )
    assert done["state"] == "succeeded" and done["secrets"] == ["API_KEY"]
    assert done["changes"]["withheld"] == [{"path": "out.txt", "secrets": ["API_KEY"]}]
    assert done["changes"]["added"] == ["other.txt"] and "out.txt" not in done["changes"]["diff"]
    assert "s3cr3t-value-42" not in str(done)


def test_a_rerun_repeats_exactly_the_recorded_inputs(agent, shop, cast):
    first = agent.wait(
        agent.run(
            "echo $GREETING from $(git --version | cut -c1-3)",
            env={"GREETING": "hi"},
            timeout_s=120,
        )
    )
    commit(shop, cast, {"app.py": "moved on\n"})  # the branch moves: a replay does not
    r = agent.client.post(
        f"/api/v1/runs/{first['id']}/rerun", {}, content_type="application/json", **agent.headers
    )
    assert r.status_code == 422 and r.json()["error"]["code"] == "env_values_required"
    assert r.json()["error"]["details"]["missing"] == ["GREETING"]
    r = agent.client.post(
        f"/api/v1/runs/{first['id']}/rerun",
        {"env": {"GREETING": "hey"}},
        content_type="application/json",
        **agent.headers,
    )
    assert r.status_code == 202, r.content
    again = agent.wait(r.json())
    for key in ("commit", "command", "image", "image_id", "runtime", "limits", "env"):
        assert again[key] == first[key], key
    assert again["rerun_of"] == first["id"] and again["state"] == "succeeded"
    assert agent.output(again) == ["hey from git"]


def test_a_rerun_whose_image_is_gone_fails_with_image_gone(agent):
    first = agent.wait(agent.run("true"))
    Run.objects.filter(public_id=first["id"]).update(image_id="sha256:" + "0" * 64)
    r = agent.client.post(
        f"/api/v1/runs/{first['id']}/rerun", {}, content_type="application/json", **agent.headers
    )
    again = agent.wait(r.json())
    assert (again["state"], again["reason"]) == ("error", "image_gone")
    assert "new run" in again["message"]


def test_another_teams_token_cannot_rerun_or_read_artifacts(client, cast, agent):
    done = agent.wait(agent.run("true"))
    _, charlie = cast.token(cast.charlie)
    for method, path in (
        ("post", f"/api/v1/runs/{done['id']}/rerun"),
        ("get", f"/api/v1/runs/{done['id']}/artifacts"),
    ):
        r = getattr(client, method)(
            path,
            **({"data": {}, "content_type": "application/json"} if method == "post" else {}),
            **bearer(charlie),
        )
        assert r.status_code == 404


def test_the_node_template_links_node_modules_to_its_cached_deps(agent, cast):
    workspace_actions.create_workspace(cast.team_a, Actor(cast.carol), "Api", "api", "node-http")
    r = agent.client.post(
        "/api/v1/workspaces/api/runs",
        {
            "command": "readlink node_modules && test -d node_modules "
            "&& node --test 2>&1 | grep -c '^# pass 2'"
        },
        content_type="application/json",
        **agent.headers,
    )
    assert r.status_code == 202, r.content
    done = agent.wait(r.json())
    assert done["state"] == "succeeded", agent.output(done)
    assert done["setup"]["skipped"] is False
    assert agent.output(done)[-2:] == ["/deps/node_modules", "1"]  # after npm's own lines
    assert done["changes"]["stats"]["files"] == 0  # the link is committed, not a change
