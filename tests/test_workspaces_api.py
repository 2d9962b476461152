"""Workspaces through the JSON API, as an agent with a token uses them."""

import base64

import pytest

from tests.conftest import bearer
from tests.test_tokens import assert_error


@pytest.fixture
def agent(client, cast):
    """An API client acting with carol's all-scopes token."""
    _, secret = cast.token(cast.carol)
    return Api(client, secret)


class Api:
    def __init__(self, client, secret: str) -> None:
        self.client, self.headers = client, bearer(secret)

    def get(self, path: str, **kw):
        return self.client.get(f"/api/v1{path}", **self.headers, **kw)

    def post(self, path: str, body):
        return self.client.post(f"/api/v1{path}", body, content_type="application/json",
                                **self.headers)

    def put(self, path: str, body):
        return self.client.put(f"/api/v1{path}", body, content_type="application/json",
                               **self.headers)

    def delete(self, path: str):
        return self.client.delete(f"/api/v1{path}", **self.headers)


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
    r = agent.post("/workspaces/shop/commits", {
        "message": "Restructure", "base_commit": shop["head"], "changes": [
            {"op": "write", "path": "src/lib/util.py", "content": "X = 1\n"},
            {"op": "rename", "path": "README.md", "to": "docs/README.md"},
            {"op": "delete", "path": "test_app.py"},
            {"op": "write", "path": "logo.bin", "encoding": "base64",
             "content": base64.b64encode(bytes(range(256))).decode()},
        ]})
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
    assert statuses == {"src/lib/util.py": "added", "docs/README.md": "renamed",
                        "test_app.py": "deleted", "logo.bin": "added"}
    assert agent.get("/workspaces/shop/files/README.md").status_code == 404


def test_a_stale_base_commit_is_a_conflict_and_changes_nothing(agent, shop):
    first = agent.put("/workspaces/shop/files/a.txt", {"content": "one"}).json()["commit"]
    r = agent.put("/workspaces/shop/files/a.txt", {"content": "two",
                                                    "base_commit": shop["head"]})
    error = assert_error(r, 409, "conflict")
    assert error["details"]["head"] == first
    assert agent.get("/workspaces/shop/files/a.txt").json()["content"] == "one"


@pytest.mark.parametrize("path", ["", "/etc/passwd", "a/../b", "../x", ".git/config",
                                  "a/.GIT/x", "a\\b", "a\x00b", "a\nb", "a//b", "./a",
                                  "x" * 1025, "/".join(["d"] * 33)])
def test_bad_paths_are_refused_and_nothing_is_written(agent, shop, path):
    r = agent.post("/workspaces/shop/commits", {"message": "x", "changes": [
        {"op": "write", "path": path, "content": "x"}]})
    assert_error(r, 422, "invalid_path")
    assert agent.get("/workspaces/shop").json()["head"] == shop["head"]
