"""Only what a person typed in the editor is their approval, and only where the team's
policy allows self-approval (issue 32, item 6): a write through any other door (an
admin's page upload, an API write, a session's commit: tests/sessions/
test_session_contract_lapse.py) approves nothing; a review waits for the team's N-th
approver; a team of one is told on its settings page, which offers self-approval."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from accounts import actions as account_actions
from accounts.access import Actor
from accounts.models import Activity, Role
from core.errors import Forbidden
from tests.support.contracts import TOML, Token, approve_on_page, held, type_in_editor
from tests.support.git import git
from tests.support.git import url as git_url
from workspaces import actions as workspace_actions
from workspaces import reviews
from workspaces.models import ContractReview, ReviewState
from workspaces.store import open_store

WIDER = "[sandbox]\nmemory_mb = 3000\n"


@pytest.fixture
def shop(cast):
    return workspace_actions.create_workspace(cast.team_a, Actor(cast.alice), "Shop", "shop")


@pytest.fixture
def agent(client, cast, shop) -> Token:
    _, secret = cast.token(cast.carol)
    return Token(client, secret)


def test_an_admins_upload_of_a_wider_toml_approves_nothing(agent, cast, signed_in, shop):
    with open_store(shop) as store:
        head = store.branch_head("main")
    upload = SimpleUploadedFile(TOML, WIDER.encode())
    r = signed_in(cast.alice).post(
        "/t/team-a/w/shop/files/upload/",
        {
            "branch": "main",
            "base_commit": head,
            "files": [upload],
        },
        HTTP_ACCEPT="application/json",
    )
    assert r.status_code == 200, r.content
    error = held(agent.run())
    review = ContractReview.objects.get(public_id=error["details"]["review"])
    assert (review.source, review.requested_by) == ("asked", cast.carol)
    assert not review.approvals.exists()


def test_with_self_approval_the_authors_typing_counts_once_toward_n_approvers(
    agent, cast, signed_in, shop
):
    cast.team_a.allow_self_approval = True
    cast.team_a.approvals_required = 2
    cast.team_a.save()
    answer = type_in_editor(signed_in(cast.bob), shop, WIDER)["contract_review"]
    review = ContractReview.objects.get(public_id=answer["id"])
    assert answer["state"] == "pending"
    assert [a.user for a in review.approvals.all()] == [cast.bob]
    mine = Activity.objects.get(verb="contract.approved", user=cast.bob)
    assert (mine.detail["self_approved"], mine.detail["approvals"], mine.detail["needed"]) == (
        True,
        1,
        2,
    )
    held(agent.run())
    assert "Approvals: 1 of 2 — bob." in signed_in(cast.alice).get(review.url).content.decode()
    signed_in(cast.alice).post(review.url + "approve/")
    review.refresh_from_db()
    assert (review.state, review.decided_by) == (ReviewState.APPROVED, cast.alice)
    assert agent.run().status_code == 202


def test_a_reviewer_saving_over_an_agents_widening_approves_none_of_it(
    agent, cast, signed_in, shop
):
    """The editor sends the whole file: a reviewer who fixes a comment in the file an
    agent widened has not typed the agent's widening, even where self-approval is on
    and one approver is enough."""
    cast.team_a.allow_self_approval = True
    cast.team_a.save()
    agent.write(WIDER)
    answer = type_in_editor(signed_in(cast.bob), shop, "# tidied by bob\n" + WIDER)
    assert answer["contract_review"] is None
    assert not ContractReview.objects.filter(requested_by=cast.bob).exists()
    error = held(agent.run())
    review = ContractReview.objects.get(public_id=error["details"]["review"])
    assert (review.state, review.requested_by) == (ReviewState.PENDING, cast.carol)
    assert not review.approvals.exists()
    # Typed from a file that asked for nothing more, the same widening is bob's.
    type_in_editor(signed_in(cast.bob), shop, "")
    mine = type_in_editor(signed_in(cast.bob), shop, WIDER)["contract_review"]
    assert mine["state"] == "approved"


def test_with_self_approval_and_one_approver_the_typed_widening_is_approved_at_once(
    agent, cast, signed_in, shop
):
    cast.team_a.allow_self_approval = True
    cast.team_a.save()
    answer = type_in_editor(signed_in(cast.bob), shop, WIDER)["contract_review"]
    assert answer["state"] == "approved"
    review = ContractReview.objects.get(public_id=answer["id"])
    assert (review.decided_by, review.self_approved, review.source) == (cast.bob, True, "page")
    assert agent.run().status_code == 202


def test_a_team_of_one_is_told_it_cannot_widen_and_is_offered_self_approval(client, signed_in):
    team, _ = account_actions.create_team("solo", "Solo")
    ada, _ = account_actions.create_user(team, "ada", Role.ADMIN, None, password="ada-password-1")
    page = signed_in(ada)
    solo = workspace_actions.create_workspace(team, Actor(ada), "Tool", "tool")
    held_review = type_in_editor(page, solo, WIDER)["contract_review"]
    assert held_review["state"] == "pending"
    members = page.get("/t/solo/members/").content.decode()
    assert 'id="self-approval-needed"' in members
    assert "can never be approved" in members and "Tick the box above" in members
    r = page.post(
        "/t/solo/policies/approvals/", {"approvals_required": "1", "allow_self_approval": "on"}
    )
    assert r.status_code == 302
    changed = Activity.objects.get(verb="team.policy_changed", user=ada)
    assert changed.detail["allow_self_approval"] is True
    assert 'id="self-approval-needed"' not in page.get("/t/solo/members/").content.decode()
    # Now her own change, confirmed on its page, passes.
    page.post(held_review["url"] + "approve/", {"confirm_own": "yes"})
    review = ContractReview.objects.get(public_id=held_review["id"])
    assert (review.state, review.self_approved) == (ReviewState.APPROVED, True)


def test_a_member_of_a_team_sees_the_notice_but_no_toggle(cast, signed_in):
    cast.team_a.approvals_required = 2  # alice and bob: neither's own widening can pass
    cast.team_a.save()
    members = signed_in(cast.carol).get("/t/team-a/members/").content.decode()
    assert 'id="self-approval-needed"' in members
    assert "An admin can allow self-approval here" in members


def test_an_admins_mcp_write_approves_nothing(cast, berth_server):
    """MCP's write_files commits through workspaces/actions.commit_changes: an admin's
    token writing a wider contract there is held like anyone's."""
    from tests.support.mcp import connect

    workspace_actions.create_workspace(cast.team_a, Actor(cast.alice), "Shop", "shop")
    _, secret = cast.token(cast.alice)

    async def body(mcp):
        write = {"op": "write", "path": TOML, "content": WIDER}
        await mcp("write_files", workspace="shop", changes=[write], message="more memory")
        error = await mcp.error("run_command", workspace="shop", command="true", wait_seconds=0)
        assert error["code"] == "contract_change_pending", error
        assert "memory_mb raised from 1024 to 3000" in error["message"]

    connect(berth_server, secret, body)
    (review,) = ContractReview.objects.filter(state=ReviewState.PENDING)
    assert (review.requested_by, review.source) == (cast.alice, "asked")
    assert not review.approvals.exists()


def test_a_reviewer_who_widened_through_the_api_cannot_approve_it_for_a_members_run(
    agent, cast, client, signed_in, shop
):
    """The review is opened by carol's run, but bob wrote the widening (his token,
    through the API): under the default policy his approval is refused, typed, and
    alice's approves it."""
    _, secret = cast.token(cast.bob)
    Token(client, secret).write(WIDER)
    error = held(agent.run())
    review = ContractReview.objects.get(public_id=error["details"]["review"])
    assert (review.requested_by, list(review.written_by.all())) == (cast.carol, [cast.bob])
    assert agent.get(f"/contract-reviews/{review.public_id}").json()["written_by"] == ["bob"]

    bob = signed_in(cast.bob)
    assert 'id="approve"' not in bob.get(review.url).content.decode()
    r = bob.post(review.url + "approve/", follow=True)
    assert "You wrote this widening of workspace.toml" in r.content.decode()
    with pytest.raises(Forbidden) as refused:
        reviews.approve(review, Actor(cast.bob))
    assert refused.value.code == "own_widening"
    review.refresh_from_db()
    assert review.state == ReviewState.PENDING and not review.approvals.exists()
    held(agent.run())

    approve_on_page(signed_in(cast.alice), review)
    review.refresh_from_db()
    assert (review.state, review.decided_by, review.self_approved) == (
        ReviewState.APPROVED,
        cast.alice,
        False,
    )
    assert agent.run().status_code == 202


def test_a_pushed_widening_is_the_pushers_whatever_author_its_commit_names(
    agent, berth_server, cast, signed_in, shop, tmp_path
):
    """Git's author line is the writer's to type: bob pushes a widening authored as
    carol (the helper's identity), and Berth names bob, who saw him at its door."""
    _, secret = cast.token(cast.bob)
    work = tmp_path / "work"
    git("clone", "-q", git_url(berth_server, secret), str(work), cwd=tmp_path)
    (work / TOML).write_text(WIDER)
    git("add", TOML, cwd=work)
    git("commit", "-qm", "more memory", cwd=work)
    git("push", "origin", "main", cwd=work)
    assert "Carol" in git("log", "-1", "--format=%an", cwd=work).stdout
    error = held(agent.run())
    review = ContractReview.objects.get(public_id=error["details"]["review"])
    assert list(review.written_by.all()) == [cast.bob]
    r = signed_in(cast.bob).post(review.url + "approve/", follow=True)
    assert "another reviewer must approve it" in r.content.decode()
    review.refresh_from_db()
    assert review.state == ReviewState.PENDING and not review.approvals.exists()
