"""A submodule (a gitlink entry, naming a commit of another repository this store never
holds) pushed with plain git shows as a submodule wherever a diff is drawn: the commit
API and page, compare, and the deploy review a reviewer reads before approving."""

import subprocess

import pytest

from accounts.access import Actor
from deploys import actions as deploy_actions
from tests.support.api import bearer
from tests.support.git import git, url
from workspaces import actions

FOREIGN = "1234567890abcdef1234567890abcdef12345678"  # no such object here


@pytest.fixture
def shop(cast):
    return actions.create_workspace(cast.team_a, Actor(cast.carol), "Shop", "shop", "python-http")


def test_a_pushed_submodule_is_shown_as_one_in_every_diff(
    berth_server, cast, shop, tmp_path, client, signed_in
):
    token, secret = cast.token(cast.carol)
    git("clone", url(berth_server, secret), "work", cwd=tmp_path)
    work = tmp_path / "work"
    base = git("rev-parse", "HEAD", cwd=work).stdout.strip()
    subprocess.run(
        ["git", "update-index", "--add", "--cacheinfo", f"160000,{FOREIGN},vendor/lib"],
        cwd=work,
        check=True,
    )
    git("commit", "-m", "Vendor a library as a submodule", cwd=work)
    git("push", "origin", "main", cwd=work)
    head = git("rev-parse", "HEAD", cwd=work).stdout.strip()

    detail = client.get(f"/api/v1/workspaces/shop/commits/{head}", **bearer(secret))
    assert detail.status_code == 200, detail.content
    [entry] = detail.json()["diff"]["files"]
    assert entry["path"] == "vendor/lib" and entry["status"] == "added"
    assert entry["submodule"] is True
    assert f"+Subproject commit {FOREIGN}" in entry["patch"]

    compared = client.get(
        f"/api/v1/workspaces/shop/compare?base={base}&head={head}", **bearer(secret)
    )
    assert compared.status_code == 200, compared.content
    assert compared.json()["diff"]["files"][0]["submodule"] is True

    carol = signed_in(cast.carol)
    page = carol.get(f"/t/team-a/w/shop/commits/{head}/")
    assert page.status_code == 200 and f"Subproject commit {FOREIGN}" in page.content.decode()

    asked = deploy_actions.request_deploy(shop, Actor(cast.carol, token), note="with vendor")
    review = signed_in(cast.bob).get(f"/t/team-a/w/shop/deploys/{asked.public_id}/")
    assert review.status_code == 200
    assert f"Subproject commit {FOREIGN}" in review.content.decode()
