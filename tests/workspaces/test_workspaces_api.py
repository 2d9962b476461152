"""Workspaces through the JSON API, as an agent with a token uses them."""

import base64

import pytest

from tests.support.api import Api, assert_error


@pytest.fixture
def agent(client, cast):
    """An API client acting with carol's all-scopes token."""
    _, secret = cast.token(cast.carol)
    return Api(client, secret)


@pytest.fixture
def shop(agent):
    r = agent.post("/workspaces", {"name": "Shop", "template": "python-http"})
    assert r.status_code == 201, r.content
    return r.json()


def test_it_creates_a_workspace_from_a_template(agent, shop):
    assert shop["slug"] == "shop" and shop["default_branch"] == "main"
    assert len(shop["head"]) == 40
    names = {e["name"]: e for e in agent.get("/workspaces/shop/tree").json()["entries"]}
    assert {"app.py", "test_app.py", "workspace.toml", "README.md"} <= set(names)
    assert names["app.py"]["type"] == "file" and names["app.py"]["size"] > 100
    f = agent.get("/workspaces/shop/files/app.py").json()
    assert f["encoding"] == "utf-8" and "def greeting" in f["content"]
    assert [w["slug"] for w in agent.get("/workspaces").json()] == ["shop"]


def test_a_commit_of_several_changes_is_one_commit(agent, shop):
    r = agent.post(
        "/workspaces/shop/commits",
        {
            "message": "Restructure",
            "base_commit": shop["head"],
            "changes": [
                {"op": "write", "path": "src/lib/util.py", "content": "X = 1\n"},
                {"op": "rename", "path": "README.md", "to": "docs/README.md"},
                {"op": "delete", "path": "test_app.py"},
                {
                    "op": "write",
                    "path": "logo.bin",
                    "encoding": "base64",
                    "content": base64.b64encode(bytes(range(256))).decode(),
                },
            ],
        },
    )
    assert r.status_code == 201, r.content
    sha = r.json()["commit"]
    assert r.json()["parent"] == shop["head"]
    log = agent.get("/workspaces/shop/commits").json()["commits"]
    assert [c["sha"] for c in log[:2]] == [sha, shop["head"]]
    assert log[0]["author"]["name"] == "carol agent (token of carol)"
    raw = agent.get("/workspaces/shop/files/logo.bin", HTTP_ACCEPT="application/octet-stream")
    assert raw.content == bytes(range(256))
    detail = agent.get(f"/workspaces/shop/commits/{sha}").json()
    statuses = {f["path"]: f["status"] for f in detail["diff"]["files"]}
    assert statuses == {
        "src/lib/util.py": "added",
        "docs/README.md": "renamed",
        "test_app.py": "deleted",
        "logo.bin": "added",
    }
    assert agent.get("/workspaces/shop/files/README.md").status_code == 404


def test_a_stale_base_commit_is_a_conflict_and_changes_nothing(agent, shop):
    first = agent.put("/workspaces/shop/files/a.txt", {"content": "one"}).json()["commit"]
    r = agent.put("/workspaces/shop/files/a.txt", {"content": "two", "base_commit": shop["head"]})
    error = assert_error(r, 409, "conflict")
    assert error["details"]["head"] == first
    assert agent.get("/workspaces/shop/files/a.txt").json()["content"] == "one"


@pytest.mark.parametrize(
    "path",
    [
        "",
        "/etc/passwd",
        "a/../b",
        "../x",
        ".git/config",
        "a/.GIT/x",
        "a\\b",
        "a\x00b",
        "a\nb",
        "a//b",
        "./a",
        "x" * 1025,
        "/".join(["d"] * 33),
        # Invisible to a reviewer: right-to-left override (the
        # name reads "evilexe.txt"), a zero-width space, a C1
        # control, a BOM, a line separator.
        "evil\u202etxt.exe",
        "a\u200bb",
        "a\x85b",
        "\ufeffa",
        "a\u2028b",
    ],
)
def test_bad_paths_are_refused_and_nothing_is_written(agent, shop, path):
    r = agent.post(
        "/workspaces/shop/commits",
        {"message": "x", "changes": [{"op": "write", "path": path, "content": "x"}]},
    )
    assert_error(r, 422, "invalid_path")
    assert agent.get("/workspaces/shop").json()["head"] == shop["head"]


def test_a_token_without_write_scope_gets_missing_scope(client, cast, shop):
    _, secret = cast.token(cast.carol, ["workspace:read"])
    reader = Api(client, secret)
    error = assert_error(
        reader.put("/workspaces/shop/files/x.txt", {"content": "x"}), 403, "missing_scope"
    )
    assert error["details"]["scope"] == "workspace:write"
    assert reader.get("/workspaces/shop/files/x.txt").status_code == 404


def test_charlie_gets_404_for_everything_of_team_a(client, cast, shop):
    _, secret = cast.token(cast.charlie)
    charlie = Api(client, secret)
    for r in [
        charlie.get("/workspaces/shop"),
        charlie.get("/workspaces/shop/tree"),
        charlie.get("/workspaces/shop/files/app.py"),
        charlie.get("/workspaces/shop/commits"),
        charlie.put("/workspaces/shop/files/x", {"content": "x"}),
        charlie.delete("/workspaces/shop"),
    ]:
        assert_error(r, 404, "not_found")
    assert charlie.get("/workspaces").json() == []


def test_a_token_limited_to_other_workspaces_gets_404(client, cast, shop):
    _, secret = cast.token(cast.carol, workspaces=["blog"])
    limited = Api(client, secret)
    assert_error(limited.get("/workspaces/shop"), 404, "not_found")
    assert limited.get("/workspaces").json() == []


@pytest.mark.parametrize(
    "body",
    [
        {"message": "x", "changes": [{"op": "write", "path": "a", "content": "x", "mode": "755"}]},
        {"message": "x", "changes": [{"op": "chmod", "path": "a"}]},
        {"message": 5, "changes": []},
        {"message": "x", "changes": "a"},
        {"message": "x", "changes": [{"op": "write", "path": ["a"], "content": "x"}]},
        {"message": "x", "base_commit": "main", "changes": []},
    ],
)
def test_malformed_commit_bodies_get_422(agent, shop, body):
    r = agent.post("/workspaces/shop/commits", body)
    assert_error(r, 422, "invalid")
    assert agent.get("/workspaces/shop").json()["head"] == shop["head"]


def test_a_deeply_nested_body_gets_422_not_500(agent, shop):
    nested = "[" * 100_000 + "]" * 100_000
    r = agent.client.post(
        "/api/v1/workspaces/shop/commits", nested, content_type="application/json", **agent.headers
    )
    assert r.status_code == 422 and r.json()["error"]["code"] in ("invalid", "invalid_json")


def test_a_rename_onto_an_existing_file_is_a_conflict(agent, shop):
    r = agent.post(
        "/workspaces/shop/commits",
        {"message": "x", "changes": [{"op": "rename", "path": "app.py", "to": "README.md"}]},
    )
    assert_error(r, 409, "conflict")
    assert "def greeting" in agent.get("/workspaces/shop/files/app.py").json()["content"]


def test_invalid_base64_is_refused(agent, shop):
    r = agent.put("/workspaces/shop/files/x.bin", {"content": "not base64!", "encoding": "base64"})
    assert_error(r, 422, "invalid_base64")


def test_a_file_over_the_size_cap_is_refused_with_413(agent, shop):
    eleven_mb = base64.b64encode(b"\0" * (11 * 1024 * 1024)).decode()
    r = agent.put("/workspaces/shop/files/big.bin", {"content": eleven_mb, "encoding": "base64"})
    assert_error(r, 413, "file_too_large")
    twenty_mb = "x" * (20 * 1024 * 1024)
    assert_error(
        agent.put("/workspaces/shop/files/big.txt", {"content": twenty_mb}), 413, "too_large"
    )
    assert agent.get("/workspaces/shop").json()["head"] == shop["head"]


def test_names_are_normalised_to_nfc(agent, shop):
    agent.put("/workspaces/shop/files/cafe\u0301.txt", {"content": "x"})
    assert agent.get("/workspaces/shop/files/caf\u00e9.txt").json()["path"] == "caf\u00e9.txt"


def test_a_lone_surrogate_in_a_path_is_refused(agent, shop):
    r = agent.client.post(
        "/api/v1/workspaces/shop/commits",
        '{"message": "x", "changes": [{"op": "write", "path": "a\\udc80", "content": "x"}]}',
        content_type="application/json",
        **agent.headers,
    )
    assert r.status_code == 422


def test_a_symlink_is_read_as_metadata_never_followed(agent, cast, shop):
    from workspaces.gitstore import MODE_LINK
    from workspaces.models import Workspace
    from workspaces.store import open_store

    workspace = Workspace.objects.get(slug="shop")
    with open_store(workspace) as store:
        head = store.branch_head("main")
        from workspaces.changes import TreeEditor

        editor = TreeEditor(store, store.commit(head).tree)
        editor._put("passwd", (MODE_LINK, store.add_blob(b"/etc/passwd")))
        sha = store.make_commit(editor.write(), [head], store_author(), "link")
        store.advance("main", head, sha)
    f = agent.get("/workspaces/shop/files/passwd").json()
    assert f["type"] == "symlink" and f["target"] == "/etc/passwd" and f["content"] is None
    raw = agent.get("/workspaces/shop/files/passwd", HTTP_ACCEPT="application/octet-stream")
    assert b"root:" not in raw.content
    entry = next(
        e for e in agent.get("/workspaces/shop/tree").json()["entries"] if e["name"] == "passwd"
    )
    assert entry["type"] == "symlink"


def store_author():
    from workspaces.gitstore import Author

    return Author("Mallory", "m@example.com")


def test_history_paging_compare_and_branches(agent, shop):
    for i in range(3):
        agent.put("/workspaces/shop/files/n.txt", {"content": f"{i}\n", "message": f"n{i}"})
    page1 = agent.get("/workspaces/shop/commits?per_page=2").json()
    page2 = agent.get("/workspaces/shop/commits?per_page=2&page=2").json()
    assert [c["title"] for c in page1["commits"]] == ["n2", "n1"] and page1["has_more"]
    assert [c["title"] for c in page2["commits"]] == ["n0", page2["commits"][1]["title"]]
    path_log = agent.get("/workspaces/shop/commits?path=n.txt").json()["commits"]
    assert len(path_log) == 3
    r = agent.post("/workspaces/shop/branches", {"name": "feature/x", "from": "main"})
    assert r.status_code == 201
    agent.put("/workspaces/shop/files/n.txt", {"content": "feature\n", "branch": "feature/x"})
    cmp = agent.get("/workspaces/shop/compare?base=main&head=feature/x").json()
    assert len(cmp["commits"]) == 1
    assert cmp["diff"]["files"][0]["patch"].splitlines()[-2:] == ["-2", "+feature"]
    assert cmp["diff"]["stats"] == {"files": 1, "additions": 1, "deletions": 1}
    names = [b["name"] for b in agent.get("/workspaces/shop/branches").json()]
    assert names == ["feature/x", "main"]
    assert_error(agent.delete("/workspaces/shop/branches/main"), 409, "conflict")
    assert agent.delete("/workspaces/shop/branches/feature/x").status_code == 204


def test_workspace_toml_errors_come_back_as_warnings_on_save(agent, shop):
    r = agent.put(
        "/workspaces/shop/files/workspace.toml", {"content": '[sandbox]\nruntime = "kvm"\n'}
    )
    assert r.status_code == 200
    warning = r.json()["warnings"][0]
    assert warning["code"] == "invalid_workspace_toml" and "line 2" in warning["message"]


def test_a_cache_key_outside_the_workspace_is_named_on_save(agent, shop):
    r = agent.put(
        "/workspaces/shop/files/workspace.toml",
        {"content": '[setup]\ncommand = "true"\ncache_key = ["../secrets"]\n'},
    )
    assert r.status_code == 200
    warning = r.json()["warnings"][0]
    assert warning["code"] == "invalid_workspace_toml" and "line 3" in warning["message"]
    assert "cache_key" in warning["message"]


def save_toml(agent, text: str) -> dict:
    """The warning saving `text` as workspace.toml gives (the commit is made anyway)."""
    r = agent.put("/workspaces/shop/files/workspace.toml", {"content": text})
    assert r.status_code == 200, r.content
    [warning] = r.json()["warnings"]
    assert warning["code"] == "invalid_workspace_toml"
    return warning


def test_an_unknown_key_is_named_with_its_line_and_the_known_keys(agent, shop):
    warning = save_toml(agent, '[preview]\ncommand = "python3 app.py"\nhealthpath = "/up"\n')
    assert warning["message"] == (
        "workspace.toml, line 3: unknown key 'healthpath' in [preview]; "
        "known: command, port, health_path."
    )
    warning = save_toml(agent, "# Berth\n\n[sandboxes]\ncpus = 1\n")
    assert warning["message"].startswith("workspace.toml, line 3: unknown section [sandboxes];")


def test_a_wrong_type_names_its_line_and_what_is_expected(agent, shop):
    warning = save_toml(agent, '[sandbox]\nruntime = "runc"\ntimeout_s = "10m"\n')
    assert warning["message"] == (
        "workspace.toml, line 3: [sandbox] timeout_s must be whole seconds, at least 1."
    )
    # A fraction is not whole megabytes either.
    warning = save_toml(agent, "[sandbox]\nmemory_mb = 512.5\n")
    assert warning["message"] == (
        "workspace.toml, line 2: [sandbox] memory_mb must be whole megabytes, at least 16."
    )


def test_a_bool_is_not_a_number_and_a_run_of_it_is_refused_naming_the_line(agent, shop):
    warning = save_toml(agent, '[preview]\ncommand = "python3 app.py"\nport = true\n')
    assert warning["message"] == (
        "workspace.toml, line 3: [preview] port must be a port from 1 to 65535."
    )
    warning = save_toml(agent, "[sandbox]\ncpus = true\n")
    assert warning["message"] == (
        "workspace.toml, line 2: [sandbox] cpus must be a number of CPUs above 0."
    )
    r = agent.post("/workspaces/shop/runs", {"command": "true"})
    assert r.status_code == 422
    assert r.json()["error"]["code"] == "invalid_workspace_toml"
    assert r.json()["error"]["message"].startswith("workspace.toml, line 2: [sandbox] cpus")


def test_the_default_image_is_the_operators_sandbox_image(agent, shop, settings):
    settings.SANDBOX_IMAGE = "berth-operator:2"
    r = agent.post("/workspaces/shop/runs", {"command": "true"})
    assert r.status_code == 202, r.content
    assert r.json()["image"] == "berth-operator:2"
    # The contract notice of a commit that names another image says what it replaced.
    r = agent.put(
        "/workspaces/shop/files/workspace.toml", {"content": '[sandbox]\nimage = "x:1"\n'}
    )
    changes = agent.get(f"/workspaces/shop/commits/{r.json()['commit']}").json()
    assert '[sandbox] image: "berth-operator:2" (default) → "x:1"' in [
        c["message"] for c in changes["contract_changes"]
    ]


def test_only_admins_delete_workspaces(client, cast, shop, agent):
    assert_error(agent.delete("/workspaces/shop"), 403, "forbidden")
    _, secret = cast.token(cast.alice)
    assert Api(client, secret).delete("/workspaces/shop").status_code == 204
    assert_error(agent.get("/workspaces/shop"), 404, "not_found")


@pytest.mark.parametrize("slug", ["xn", "Bad", "a--b"])
def test_bad_or_reserved_slugs_are_refused(agent, slug):
    assert_error(agent.post("/workspaces", {"name": "X", "slug": slug}), 422, "invalid_slug")


def test_a_taken_slug_is_a_conflict(agent, shop):
    assert_error(agent.post("/workspaces", {"name": "Shop"}), 409, "conflict")


# -- folders ---------------------------------------------------------------------------


def folder_names(agent, path: str = "") -> set[str]:
    return {e["name"] for e in agent.get(f"/workspaces/shop/tree?path={path}").json()["entries"]}


@pytest.fixture
def docs(agent, shop) -> str:
    """A folder of two files and a subfolder; the commit that made it."""
    r = agent.post(
        "/workspaces/shop/commits",
        {
            "message": "Docs",
            "changes": [
                {"op": "write", "path": "docs/a.md", "content": "A\n"},
                {"op": "write", "path": "docs/deep/b.md", "content": "B\n"},
            ],
        },
    )
    assert r.status_code == 201, r.content
    return r.json()["commit"]


def test_a_folder_is_renamed_with_everything_in_it_as_one_commit(agent, docs):
    r = agent.post(
        "/workspaces/shop/folders/rename", {"path": "docs", "to": "guides", "base_commit": docs}
    )
    assert r.status_code == 200, r.content
    assert r.json()["parent"] == docs and r.json()["files"] == ["docs", "guides"]
    assert "docs" not in folder_names(agent) and "guides" in folder_names(agent)
    assert agent.get("/workspaces/shop/files/guides/deep/b.md").json()["content"] == "B\n"
    log = agent.get("/workspaces/shop/commits").json()["commits"]
    assert log[0]["title"] == "Rename folder docs to guides" and log[1]["sha"] == docs


def test_a_folder_is_deleted_as_one_commit(agent, docs):
    r = agent.delete(f"/workspaces/shop/folders/docs?base_commit={docs}")
    assert r.status_code == 200, r.content
    assert "docs" not in folder_names(agent)
    assert_error(agent.get("/workspaces/shop/files/docs/a.md"), 404, "not_found")
    assert (
        agent.get("/workspaces/shop/commits").json()["commits"][0]["title"] == "Delete folder docs"
    )


def test_a_file_door_refuses_a_folder_and_a_folder_door_a_file(agent, docs):
    assert_error(agent.delete("/workspaces/shop/files/docs"), 422, "is_a_directory")
    assert_error(agent.delete("/workspaces/shop/folders/docs/a.md"), 422, "not_a_directory")
    r = agent.post("/workspaces/shop/folders/rename", {"path": "app.py", "to": "x.py"})
    assert_error(r, 422, "not_a_directory")
    assert_error(agent.delete("/workspaces/shop/folders/nowhere"), 404, "not_found")
    assert agent.get("/workspaces/shop/commits").json()["commits"][0]["sha"] == docs


@pytest.mark.parametrize("to", [".git", "../up", "/abs", "docs/inside", "a\u202eb", "README.md"])
def test_a_folder_rename_follows_the_path_rules(agent, docs, to):
    r = agent.post("/workspaces/shop/folders/rename", {"path": "docs", "to": to})
    assert r.status_code in (409, 422), r.content
    assert "docs" in folder_names(agent)
    assert agent.get("/workspaces/shop/commits").json()["commits"][0]["sha"] == docs


def test_a_folder_changed_on_the_branch_since_its_base_is_never_deleted_unseen(agent, docs):
    agent.put("/workspaces/shop/files/docs/c.md", {"content": "C\n", "base_commit": docs})
    err = assert_error(
        agent.delete(f"/workspaces/shop/folders/docs?base_commit={docs}"), 409, "conflict"
    )
    assert err["details"]["paths"] == ["docs"]
    r = agent.post(
        "/workspaces/shop/folders/rename", {"path": "docs", "to": "guides", "base_commit": docs}
    )
    assert_error(r, 409, "conflict")
    assert {"a.md", "c.md", "deep"} == folder_names(agent, "docs")


def test_charlie_cannot_touch_team_as_folders(client, cast, docs):
    _, secret = cast.token(cast.charlie)
    other = Api(client, secret)
    assert_error(other.delete("/workspaces/shop/folders/docs"), 404, "not_found")
    r = other.post("/workspaces/shop/folders/rename", {"path": "docs", "to": "x"})
    assert_error(r, 404, "not_found")
