"""Contract reviews as the tests drive them: an agent's token through the JSON API, and
a signed-in person typing `workspace.toml` in the editor (the page's save door)."""

from django.test import Client

from tests.support.api import bearer
from workspaces.models import ContractReview
from workspaces.store import open_store

TOML = "workspace.toml"


class Token:
    """An agent on a workspace of its team through the JSON API."""

    def __init__(self, client, secret: str, slug: str = "shop") -> None:
        self.client, self.headers, self.slug = client, bearer(secret), slug

    def write(self, text: str, path: str = TOML) -> str:
        head = self.get(f"/workspaces/{self.slug}").json()["head"]
        r = self.client.post(
            f"/api/v1/workspaces/{self.slug}/commits",
            {
                "message": "contract",
                "base_commit": head,
                "changes": [{"op": "write", "path": path, "content": text}],
            },
            content_type="application/json",
            **self.headers,
        )
        assert r.status_code == 201, r.content
        return r.json()["commit"]

    def post(self, path: str, body: dict | None = None):
        return self.client.post(
            f"/api/v1{path}", body or {}, content_type="application/json", **self.headers
        )

    def run(self, **body):
        return self.post(f"/workspaces/{self.slug}/runs", {"command": "true", **body})

    def get(self, path: str):
        return self.client.get(f"/api/v1{path}", **self.headers)


def held(r, code: str = "contract_change_pending") -> dict:
    assert r.status_code == 409, r.content
    error = r.json()["error"]
    assert error["code"] == code, error
    return error


def type_in_editor(page: Client, workspace, text: str) -> dict:
    """`workspace.toml` typed in the editor and saved, from the branch's head (the page's
    save door, JSON in and out); the answer says the contract review it made, if any."""
    with open_store(workspace) as store:
        head = store.branch_head(workspace.default_branch)
    r = page.post(
        f"/t/{workspace.team.slug}/w/{workspace.slug}/save/",
        {"path": TOML, "content": text, "branch": workspace.default_branch, "base_commit": head},
        content_type="application/json",
    )
    assert r.status_code == 200, r.content
    return r.json()


def approve_on_page(page: Client, review: dict | ContractReview) -> None:
    url = review.url if isinstance(review, ContractReview) else review["url"]
    r = page.post(url + "approve/")
    assert r.status_code == 302, r.content
