"""Changes that widen what a sandbox may do wait for a human (issue 24): through the
doors an agent uses (the JSON API with a token, git push is the same actor) and the
pages a reviewer uses. Admission is what these check; one test runs the approved run to
its end on the real stack (below, docker)."""

import importlib

import pytest
from django.apps import apps
from django.conf import settings

from accounts.access import Actor
from accounts.models import Activity
from runs.models import Run
from tests.support.api import bearer
from tests.support.contracts import TOML, Token, approve_on_page, held, type_in_editor
from tests.support.git import git
from tests.support.git import url as git_url
from tests.support.runs import Agent as RunAgent
from workspaces import actions as workspace_actions
from workspaces.models import ContractReview, ReviewState

BASE = (
    '[sandbox]\nruntime = "gvisor"\nmemory_mb = 512\ntimeout_s = 300\n\n'
    '[network]\negress = ["pypi.org", "*.files.test"]\n'
)


@pytest.fixture
def shop(cast, signed_in):
    """Team A's workspace, its contract typed by alice (admin) in the editor: a widening
    of the defaults, so a review that another reviewer (bob) approves on its page (the
    team's default policy: nobody approves their own change)."""
    workspace = workspace_actions.create_workspace(cast.team_a, Actor(cast.alice), "Shop", "shop")
    review = type_in_editor(signed_in(cast.alice), workspace, BASE)["contract_review"]
    assert review["state"] == ReviewState.PENDING
    approve_on_page(signed_in(cast.bob), review)
    return workspace


@pytest.fixture
def agent(client, cast, shop) -> Token:
    _, secret = cast.token(cast.carol)
    return Token(client, secret)


def test_a_tokens_egress_widening_is_held_with_its_review_until_a_reviewer_approves(
    agent, cast, signed_in, shop
):
    sha = agent.write(BASE.replace('"pypi.org"', '"pypi.org", "index.test:8443"'))
    error = held(agent.run())
    review = ContractReview.objects.get(public_id=error["details"]["review"])
    url = f"{settings.APP_URL}/t/team-a/w/shop/contract-reviews/{review.public_id}/"
    assert error["details"]["url"] == url and url in error["message"]
    assert "egress to index.test:8443" in error["message"]
    assert "A reviewer or admin must approve it" in error["message"]
    assert [w["key"] for w in error["details"]["widened"]] == ["egress"]
    assert (review.state, review.commit, review.token.user) == (
        ReviewState.PENDING,
        sha,
        cast.carol,
    )
    assert review.commit_author.startswith("carol agent (token of carol)")
    # Asked again: the same review, still held; nothing was queued.
    assert held(agent.run())["details"]["review"] == review.public_id
    assert not Run.objects.exists()
    # The dashboard and the workspace's tabs count what waits, as for deploys.
    dashboard = signed_in(cast.bob).get("/t/team-a/").content.decode()
    assert 'Contracts to review <span class="badge pending-reviews" title="1 sandbox' in dashboard
    tabs = signed_in(cast.carol).get("/t/team-a/w/shop/").content.decode()
    assert 'class="badge pending-reviews"' in tabs
    # The page shows the widening item by item, with the commit and who wrote it.
    page = signed_in(cast.bob).get(url).content.decode()
    assert 'data-key="egress"' in page and "index.test:8443" in page and sha[:12] in page
    assert "carol agent" in page
    r = signed_in(cast.bob).post(url + "approve/", {"note": "the internal index"})
    assert r.status_code == 302
    review.refresh_from_db()
    assert (review.state, review.decided_by, review.note) == (
        ReviewState.APPROVED,
        cast.bob,
        "the internal index",
    )
    r = agent.run()
    assert r.status_code == 202, r.content
    assert r.json()["contract_review"]["id"] == review.public_id
    assert r.json()["contract_review"]["decided_by"] == "bob"
    verbs = list(
        Activity.objects.filter(target=f"contract-review:{review.public_id}").values_list(
            "verb", flat=True
        )
    )
    assert sorted(verbs) == ["contract.approved", "contract.review_opened"]


def test_a_per_request_runtime_override_to_runc_is_held_the_same_way(agent):
    error = held(agent.run(runtime="runc"))
    assert [w["key"] for w in error["details"]["widened"]] == ["runtime"]
    assert "runc instead of gVisor" in error["message"]
    review = ContractReview.objects.get(public_id=error["details"]["review"])
    assert review.values["runtime"] == "runc" and "runtime=runc" in review.asked_for
    # Asking for what was approved goes on meanwhile.
    assert agent.run().status_code == 202
    assert agent.run(runtime="gvisor").status_code == 202


def test_a_longer_timeout_asked_in_the_request_is_held(agent):
    error = held(agent.run(timeout_s=900))
    assert [w["key"] for w in error["details"]["widened"]] == ["timeout_s"]
    assert agent.run(timeout_s=60).status_code == 202


@pytest.mark.parametrize(
    "change,key",
    [
        (('"pypi.org", "*.files.test"', '"pypi.org", "*.files.test", "other.test"'), "egress"),
        (('"*.files.test"', '"*.test"'), "egress"),  # a broader wildcard
        (('"pypi.org"', '"pypi.org:8443"'), "egress"),  # a port not allowed before
        (('runtime = "gvisor"', 'runtime = "runc"'), "runtime"),
        (("memory_mb = 512", "memory_mb = 1024"), "memory_mb"),
        (("timeout_s = 300", "timeout_s = 900"), "timeout_s"),
        (("[sandbox]\n", "[sandbox]\ncpus = 2\n"), "cpus"),
        (("[sandbox]\n", "[sandbox]\ndisk_mb = 4096\n"), "disk_mb"),
        (("[sandbox]\n", '[sandbox]\nimage = "python:3.13"\n'), "image"),
    ],
    ids=[
        "egress-host",
        "egress-wildcard",
        "egress-port",
        "runtime",
        "memory",
        "timeout",
        "cpus",
        "disk",
        "image",
    ],
)
def test_each_kind_of_widening_is_caught(agent, change, key):
    old, new = change
    assert old in BASE
    agent.write(BASE.replace(old, new))
    error = held(agent.run())
    assert [w["key"] for w in error["details"]["widened"]] == [key]


def test_a_narrowing_commit_needs_nothing(agent):
    agent.write(
        '[sandbox]\nruntime = "gvisor"\nmemory_mb = 256\ntimeout_s = 60\n\n'
        '[network]\negress = ["a.files.test"]\n'
    )
    r = agent.run()
    assert r.status_code == 202, r.content
    assert not ContractReview.objects.filter(state=ReviewState.PENDING).exists()


def test_an_entry_outside_the_team_ceiling_still_counts_and_the_review_says_so(agent, cast):
    cast.team_a.egress_ceiling = ["pypi.org"]
    cast.team_a.save()
    agent.write(BASE.replace('"pypi.org"', '"pypi.org", "other.test"'))
    error = held(agent.run())
    (egress,) = error["details"]["widened"]
    assert egress["added"] == ["other.test"] and egress["outside_ceiling"] == ["other.test"]
    assert "ceiling would drop other.test" in error["message"]


def test_a_reviewers_typed_widening_waits_for_another_reviewer_and_a_members_too(
    agent, cast, signed_in, shop
):
    """Issue 32, item 6: typing a widening in the editor is the author's approval only
    where the team allows self-approval (not by default): it waits for another."""
    bob = signed_in(cast.bob)
    answer = type_in_editor(bob, shop, BASE.replace("memory_mb = 512", "memory_mb = 2048"))
    review = ContractReview.objects.get(values__memory_mb=2048)
    assert answer["contract_review"] == {
        "id": review.public_id,
        "state": "pending",
        "url": review.url,
    }
    assert (review.state, review.source, review.requested_by) == (
        ReviewState.PENDING,
        "page",
        cast.bob,
    )
    assert review.asked_for == "typed in the editor"
    assert not review.approvals.exists()
    held(agent.run())
    # bob's own approval is refused (his change), alice's decides it.
    assert "another reviewer must approve it" in bob.get(review.url).content.decode()
    bob.post(review.url + "approve/")
    review.refresh_from_db()
    assert review.state == ReviewState.PENDING
    approve_on_page(signed_in(cast.alice), review)
    review.refresh_from_db()
    assert (review.state, review.decided_by, review.self_approved) == (
        ReviewState.APPROVED,
        cast.alice,
        False,
    )
    assert agent.run().status_code == 202
    # A member's change on the same page is not approved by being written, nor opened.
    answer = type_in_editor(
        signed_in(cast.carol), shop, BASE.replace("memory_mb = 512", "memory_mb = 4096")
    )
    assert answer["contract_review"] is None
    held(agent.run())


def test_the_tokens_owner_cannot_approve_unless_the_team_allows_it_and_they_confirm(
    client, cast, signed_in, shop
):
    _, secret = cast.token(cast.bob)  # a reviewer's own agent
    mine = Token(client, secret)
    mine.write(BASE.replace("memory_mb = 512", "memory_mb = 768"))
    review = ContractReview.objects.get(public_id=held(mine.run())["details"]["review"])
    bob = signed_in(cast.bob)
    assert "another reviewer must approve it" in bob.get(review.url).content.decode()
    bob.post(review.url + "approve/", {"confirm_own": "yes"})
    review.refresh_from_db()
    assert review.state == ReviewState.PENDING
    cast.team_a.allow_self_approval = True
    cast.team_a.save()
    bob.post(review.url + "approve/")  # without the confirmation: still refused
    review.refresh_from_db()
    assert review.state == ReviewState.PENDING
    bob.post(review.url + "approve/", {"confirm_own": "yes"})
    review.refresh_from_db()
    assert (review.state, review.self_approved) == (ReviewState.APPROVED, True)
    assert mine.run().status_code == 202


def test_no_token_can_decide_through_any_door(agent, cast, client, berth_server):
    deploy = '\n[deploy]\ncommand = "python3 -m http.server 8000"\nport = 8000\n'
    agent.write(BASE.replace("timeout_s = 300", "timeout_s = 400") + deploy)
    review_id = held(agent.run())["details"]["review"]
    review = ContractReview.objects.get(public_id=review_id)
    # The API reads a review, never decides it.
    seen = agent.get(f"/contract-reviews/{review_id}").json()
    assert seen["state"] == "pending" and seen["url"] == settings.APP_URL + review.url
    assert "reviewer or admin must approve it" in seen["next"]
    for verb in ("approve", "reject"):
        assert agent.post(f"/contract-reviews/{review_id}/{verb}").status_code in (404, 405)
    # The page door with a bearer token sees nobody signed in.
    r = client.post(review.url + "approve/", **agent.headers)
    assert r.status_code == 302 and r["Location"].startswith("/signin/")
    # MCP has read tools only.
    from tests.support.mcp import connect

    _, secret = cast.token(cast.alice)

    async def body(mcp):
        names = {t.name for t in (await mcp.client.list_tools()).tools}
        assert "get_contract_review" in names
        assert not [n for n in names if "approve" in n or "reject" in n]
        got = await mcp("get_contract_review", id=review_id)
        assert got["state"] == "pending" and got["widened"][0]["key"] == "timeout_s"
        error = await mcp.error("run_command", workspace="shop", command="true", wait_seconds=0)
        assert error["code"] == "contract_change_pending" and review.url in error["message"]
        error = await mcp.error("request_deploy", workspace="shop")
        assert error["code"] == "contract_change_pending"
        assert "timeout_s raised from 300 to 400" in error["message"]
        assert "or revert the change" in error["message"]

    connect(berth_server, secret, body)
    review.refresh_from_db()
    assert review.state == ReviewState.PENDING


def test_a_revert_to_an_approved_contract_runs_at_once(agent):
    agent.write(BASE.replace("memory_mb = 512", "memory_mb = 3000"))
    held(agent.run())
    agent.write(BASE)
    assert agent.run().status_code == 202


def test_a_rejected_change_keeps_refusing_until_reverted(agent, cast, signed_in):
    agent.write(BASE.replace('"pypi.org"', '"pypi.org", "evil.test"'))
    review_id = held(agent.run())["details"]["review"]
    review = ContractReview.objects.get(public_id=review_id)
    r = signed_in(cast.bob).post(review.url + "reject/", {"note": "no new hosts"})
    assert r.status_code == 302
    error = held(agent.run(), "contract_change_rejected")
    assert "bob rejected" in error["message"] and "Revert the change" in error["message"]
    held(agent.run(), "contract_change_rejected")
    # A reviewer cannot approve what is decided; reverting is the way back.
    signed_in(cast.alice).post(review.url + "approve/")
    review.refresh_from_db()
    assert review.state == ReviewState.REJECTED
    agent.write(BASE)
    assert agent.run().status_code == 202


def test_a_preview_and_a_deploy_of_a_widened_contract_are_held(agent, cast):
    toml = BASE + '\n[preview]\ncommand = "python3 -m http.server 8000"\nport = 8000\n'
    toml += '\n[deploy]\ncommand = "python3 -m http.server 8000"\nport = 8000\n'
    agent.write(toml.replace("timeout_s = 300", "timeout_s = 301"))
    preview = held(agent.post("/workspaces/shop/previews", {}))
    deploy = held(agent.post("/workspaces/shop/deploys", {}))
    assert preview["details"]["review"] == deploy["details"]["review"]
    assert (
        "a preview" in ContractReview.objects.get(public_id=preview["details"]["review"]).asked_for
    )


def test_other_teams_get_404_for_a_review(agent, cast, client):
    agent.write(BASE.replace("timeout_s = 300", "timeout_s = 310"))
    review_id = held(agent.run())["details"]["review"]
    _, theirs = cast.token(cast.charlie)
    r = client.get(f"/api/v1/contract-reviews/{review_id}", **bearer(theirs))
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


def test_the_migration_approves_each_workspaces_default_branch_contract(shop, agent):
    ContractReview.objects.all().delete()
    migration = importlib.import_module("workspaces.migrations.0006_approve_current_contracts")
    migration.approve_current(apps, None)
    (review,) = ContractReview.objects.filter(workspace=shop)
    assert (review.state, review.source, review.values["egress"]) == (
        ReviewState.APPROVED,
        "initial",
        ["*.files.test", "pypi.org"],
    )
    assert agent.run().status_code == 202
    held(agent.run(runtime="runc"))


@pytest.mark.docker
def test_once_approved_the_held_run_goes_through_to_its_end(client, cast, signed_in, run_stack):
    workspace_actions.create_workspace(cast.team_a, Actor(cast.alice), "Shop", "shop")
    _, secret = cast.token(cast.carol)
    agent = Token(client, secret)
    agent.write("[sandbox]\nmemory_mb = 2048\n")
    review = ContractReview.objects.get(public_id=held(agent.run())["details"]["review"])
    assert signed_in(cast.bob).post(review.url + "approve/").status_code == 302
    runs = RunAgent(client, secret)
    done = runs.wait(runs.run("echo through"))
    assert done["state"] == "succeeded", done
    assert done["limits"]["memory_mb"] == 2048
    assert done["contract_review"]["id"] == review.public_id
    assert "through" in runs.output(done)


def test_a_pushed_widening_is_held_like_any_tokens(berth_server, cast, shop, client, tmp_path):
    """Every `git push` is a token's: even an admin's push waits for a review."""
    _, secret = cast.token(cast.alice)
    work = tmp_path / "work"
    git("clone", "-q", git_url(berth_server, secret), str(work), cwd=tmp_path)
    (work / TOML).write_text(BASE.replace("memory_mb = 512", "memory_mb = 1500"))
    git("commit", "-qam", "more memory", cwd=work)
    git("push", "-q", "origin", "main", cwd=work)
    error = held(Token(client, secret).run())
    review = ContractReview.objects.get(public_id=error["details"]["review"])
    assert review.token is not None and review.requested_by == cast.alice
    assert review.commit_author.startswith("Carol <carol@example.com>")
    assert [w["key"] for w in review.widened] == ["memory_mb"]


def test_a_team_that_needs_two_approvers_for_deploys_needs_them_for_a_contract(
    agent, cast, signed_in
):
    cast.team_a.approvals_required = 2
    cast.team_a.save()
    agent.write(BASE.replace("memory_mb = 512", "memory_mb = 900"))
    review = ContractReview.objects.get(public_id=held(agent.run())["details"]["review"])
    bob = signed_in(cast.bob)
    bob.post(review.url + "approve/")
    review.refresh_from_db()
    assert review.state == ReviewState.PENDING
    assert "Approvals: 1 of 2 — bob." in bob.get(review.url).content.decode()
    held(agent.run())
    r = bob.post(review.url + "approve/", follow=True)  # the same person twice
    assert "You have approved this contract already." in r.content.decode()
    signed_in(cast.alice).post(review.url + "approve/")
    review.refresh_from_db()
    assert (review.state, review.decided_by) == (ReviewState.APPROVED, cast.alice)
    assert agent.run().status_code == 202
