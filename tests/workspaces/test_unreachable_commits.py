"""A refused push leaves its objects in the store, but they are never usable: a SHA
works on a door only if a branch or tag reaches it, or a Berth record (a run's input, a
deploy request) pinned it while it was reachable. So an old run stays viewable and
re-runnable after a force-push, and nothing a refused push carried can be read, run or
deployed — on the API, MCP, the pages or git."""

from pathlib import Path

import pytest

from accounts.access import Actor
from runs.models import Run
from tests.support.api import bearer
from tests.support.git import git, url
from tests.support.mcp import connect
from workspaces import actions
from workspaces.store import open_store


@pytest.fixture
def shop(cast):
    return actions.create_workspace(cast.team_a, Actor(cast.carol), "Shop", "shop", "python-http")


def refused_commit(server, secret: str, tmp_path: Path) -> str:
    """A commit whose push to the default branch was refused (a force-push): its objects
    are in the store now, reachable from nothing."""
    git("clone", url(server, secret), "work", cwd=tmp_path)
    work = tmp_path / "work"
    (work / "secret-plan.txt").write_text("never accepted\n")
    git("add", ".", cwd=work)
    git("commit", "--amend", "-m", "rewritten history", cwd=work)
    result = git("push", "--force", "origin", "main", cwd=work, check=False)
    assert result.returncode != 0 and "force-push" in result.stderr
    return git("rev-parse", "HEAD", cwd=work).stdout.strip()


def assert_not_found(response, what: str) -> None:
    assert response.status_code == 404, (what, response.content)
    assert response.json()["error"]["code"] == "ref_not_found", what


def test_a_refused_pushs_commit_is_usable_on_no_door(
    berth_server, cast, shop, tmp_path, client, signed_in
):
    _, secret = cast.token(cast.carol)
    sha = refused_commit(berth_server, secret, tmp_path)
    with open_store(shop) as store:
        assert sha.encode() in store.repo.object_store  # there, yet unusable
    auth = bearer(secret)
    for ref in (sha, sha[:10]):
        for path in (
            f"files/secret-plan.txt?ref={ref}",
            f"tree?ref={ref}",
            f"commits/{ref}",
            f"compare?base=main&head={ref}",
        ):
            assert_not_found(client.get(f"/api/v1/workspaces/shop/{path}", **auth), path)
        assert_not_found(
            client.post(
                "/api/v1/workspaces/shop/runs",
                {"command": "cat secret-plan.txt", "ref": ref},
                content_type="application/json",
                **auth,
            ),
            "run",
        )
        assert_not_found(
            client.post(
                "/api/v1/workspaces/shop/deploys",
                {"ref": ref},
                content_type="application/json",
                **auth,
            ),
            "deploy",
        )
    assert not Run.objects.exists()
    carol = signed_in(cast.carol)
    assert carol.get(f"/t/team-a/w/shop/commits/{sha}/").status_code == 404
    page = carol.get(f"/t/team-a/w/shop/?ref={sha}&path=secret-plan.txt")
    assert "never accepted" not in page.content.decode()

    async def body(agent) -> None:
        error = await agent.error("read_file", workspace="shop", path="secret-plan.txt", ref=sha)
        assert error["code"] == "ref_not_found", error
        error = await agent.error("run_command", workspace="shop", command="true", ref=sha)
        assert error["code"] == "ref_not_found", error

    connect(berth_server, secret, body)


def test_a_runs_commit_stays_usable_after_a_force_push_leaves_it_behind(
    berth_server, cast, shop, tmp_path, client, signed_in
):
    signed_in(cast.alice).post("/t/team-a/w/shop/settings/push-policy/", {"allow_force_push": "on"})
    _, secret = cast.token(cast.carol)
    auth = bearer(secret)
    git("clone", url(berth_server, secret), "work", cwd=tmp_path)
    work = tmp_path / "work"
    for name in ("ran.txt", "not-ran.txt"):
        (work / name).write_text(f"{name}\n")
        git("add", ".", cwd=work)
        git("commit", "-m", name, cwd=work)
        git("push", "origin", "main", cwd=work)
    ran = git("rev-parse", "HEAD~1", cwd=work).stdout.strip()
    not_ran = git("rev-parse", "HEAD", cwd=work).stdout.strip()
    r = client.post(
        "/api/v1/workspaces/shop/runs",
        {"command": "true", "ref": ran},
        content_type="application/json",
        **auth,
    )
    assert r.status_code == 202, r.content
    git("reset", "--hard", "HEAD~2", cwd=work)
    git("push", "--force", "origin", "main", cwd=work)  # both commits left behind

    assert client.get(f"/api/v1/workspaces/shop/commits/{ran}", **auth).status_code == 200
    assert (
        client.get(f"/api/v1/workspaces/shop/files/ran.txt?ref={ran}", **auth).json()["content"]
        == "ran.txt\n"
    )
    assert_not_found(
        client.get(f"/api/v1/workspaces/shop/commits/{not_ran}", **auth),
        "an unpinned commit left behind",
    )
