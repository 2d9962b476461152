"""Approvals lapse (issue 32, item 5): a reviewer's narrower contract typed in the
editor is the workspace's baseline and supersedes the approvals wider than it, and a
reviewer revokes an approval on its page; either way an ask for a lapsed contract is
held for review again. And Berth's own limits are no widening of the contract a
workspace was created with (item 12). Through the API with tokens and the pages as
signed-in people; what still runs under a lapsed approval is in
tests/sessions/test_session_contract_lapse.py (docker)."""

import pytest

from accounts.access import Actor
from accounts.models import Activity
from runs.models import Run
from tests.support.contracts import Token, approve_on_page, held, type_in_editor
from workspaces import actions as workspace_actions
from workspaces.models import ContractReview, ReviewState, Workspace

WIDE = '[sandbox]\nmemory_mb = 512\n\n[network]\negress = ["*.example.com"]\n'
NARROW = WIDE.replace('"*.example.com"', '"api.example.com"')


@pytest.fixture
def shop(cast, signed_in):
    """Team A's workspace, its contract (egress to *.example.com) typed by alice and
    approved by bob."""
    workspace = workspace_actions.create_workspace(cast.team_a, Actor(cast.alice), "Shop", "shop")
    approve_on_page(
        signed_in(cast.bob),
        type_in_editor(signed_in(cast.alice), workspace, WIDE)["contract_review"],
    )
    return workspace


@pytest.fixture
def agent(client, cast, shop) -> Token:
    _, secret = cast.token(cast.carol)
    return Token(client, secret)


def test_a_reviewers_narrowing_supersedes_the_wider_approval_for_the_whole_workspace(
    agent, cast, signed_in, shop, django_capture_on_commit_callbacks
):
    """The issue's scenario: narrowed to api.example.com on the page, a member's token
    that adds evil.example.com is held, not admitted under the old, wider approval."""
    wide = ContractReview.objects.get(state=ReviewState.APPROVED, values__egress=["*.example.com"])
    agent.write(WIDE.replace('"*.example.com"', '"a.example.com", "b.example.com"'))
    queued = agent.run()
    assert queued.status_code == 202  # within *.example.com: it is admitted
    # bob narrows on the page: the new baseline, approved at once (asking for less).
    with django_capture_on_commit_callbacks(execute=True):
        answer = type_in_editor(signed_in(cast.bob), shop, NARROW)["contract_review"]
    # The run admitted under the wider approval, still queued, is stopped, said why.
    run = Run.objects.get(public_id=queued.json()["id"])
    assert (run.state, run.reason) == ("cancelled", "contract_lapsed")
    assert "approval of its sandbox contract lapsed (bob narrowed" in run.message
    narrow = ContractReview.objects.get(public_id=answer["id"])
    assert (narrow.state, narrow.source, narrow.decided_by) == (
        ReviewState.APPROVED,
        "page",
        cast.bob,
    )
    wide.refresh_from_db()
    assert (wide.state, wide.lapsed_by) == (ReviewState.SUPERSEDED, cast.bob)
    assert Activity.objects.filter(verb="contract.narrowed", user=cast.bob).exists()
    superseded = Activity.objects.get(
        verb="contract.superseded", target=f"contract-review:{narrow.public_id}"
    )
    assert superseded.user == cast.bob
    assert superseded.detail["superseded"] == [wide.public_id]
    assert agent.run().status_code == 202  # the narrowed contract itself runs
    # A member's token adds evil.example.com: held, against api.example.com.
    agent.write(NARROW.replace('"api.example.com"', '"api.example.com", "evil.example.com"'))
    error = held(agent.run())
    (egress,) = error["details"]["widened"]
    assert egress["added"] == ["evil.example.com"] and egress["before"] == ["api.example.com"]
    # The superseded contract itself no longer counts: asking for it opens a new review.
    agent.write(WIDE)
    again = held(agent.run())
    assert again["details"]["review"] != wide.public_id
    assert [w["key"] for w in again["details"]["widened"]] == ["egress"]
    assert ContractReview.objects.filter(content_hash=wide.content_hash).count() == 2
    # The API says what became of the old approval, and what to do.
    seen = agent.get(f"/contract-reviews/{wide.public_id}").json()
    assert (seen["state"], seen["lapsed_by"]) == ("superseded", "bob")
    assert "no longer counts" in seen["next"]
    page = signed_in(cast.carol).get(wide.url).content.decode()
    assert 'id="review-lapsed"' in page and "Superseded by <strong>bob</strong>" in page


def test_a_members_narrowing_or_a_tokens_is_no_baseline(agent, cast, signed_in, shop):
    approved = set(ContractReview.objects.filter(state=ReviewState.APPROVED))
    assert type_in_editor(signed_in(cast.carol), shop, NARROW)["contract_review"] is None
    assert agent.run().status_code == 202
    assert set(ContractReview.objects.filter(state=ReviewState.APPROVED)) == approved
    agent.write(WIDE)
    assert agent.run().status_code == 202  # still approved


def test_a_reviewer_revokes_an_approval_on_its_page_and_its_asks_are_held_again(
    agent, cast, client, signed_in, shop
):
    agent.write(WIDE.replace("memory_mb = 512", "memory_mb = 4096"))
    review = ContractReview.objects.get(public_id=held(agent.run())["details"]["review"])
    approve_on_page(signed_in(cast.bob), review)
    assert agent.run().status_code == 202
    page = signed_in(cast.bob).get(review.url).content.decode()
    assert 'id="review-revoke"' in page and "Approvals are per workspace" in page
    # Nobody else revokes: not a token (API, or the page with a bearer), not a member.
    for verb in ("revoke",):
        assert agent.post(f"/contract-reviews/{review.public_id}/{verb}").status_code in (404, 405)
    r = client.post(review.url + "revoke/", **agent.headers)
    assert r.status_code == 302 and r["Location"].startswith("/signin/")
    r = signed_in(cast.carol).post(review.url + "revoke/", follow=True)
    assert "Only a reviewer or an admin" in r.content.decode()
    review.refresh_from_db()
    assert review.state == ReviewState.APPROVED
    # bob revokes it: recorded with who, and the same ask is held by a new review.
    r = signed_in(cast.bob).post(review.url + "revoke/", {"note": "too much memory"})
    assert r.status_code == 302
    review.refresh_from_db()
    assert (review.state, review.lapsed_by, review.lapse_note) == (
        ReviewState.REVOKED,
        cast.bob,
        "too much memory",
    )
    revoked = Activity.objects.get(verb="contract.revoked")
    assert (revoked.user, revoked.target) == (cast.bob, f"contract-review:{review.public_id}")
    error = held(agent.run())
    assert error["details"]["review"] != review.public_id
    assert "memory_mb raised from 512 to 4096" in error["message"]
    # Revoked once is revoked: a second revoke is refused, said.
    r = signed_in(cast.alice).post(review.url + "revoke/", follow=True)
    assert "Only an approved contract can be revoked; this one is revoked." in r.content.decode()


def test_the_last_approval_is_not_revoked_it_would_fall_back_to_wider_defaults(
    cast, signed_in, shop
):
    """Without any approval, asks are compared with Berth's defaults (runc, 1024 MB),
    which may allow more than the one approval left: revoking it is refused, and the
    page says how to take access back instead."""
    approved = list(
        ContractReview.objects.filter(workspace=shop, state=ReviewState.APPROVED).order_by("pk")
    )
    bob = signed_in(cast.bob)
    for review in approved[:-1]:
        assert bob.post(review.url + "revoke/").status_code == 302
    last = approved[-1]
    page = bob.post(last.url + "revoke/", follow=True).content.decode()
    assert "only approved contract: without it" in page
    assert "type a narrower workspace.toml in the editor" in page
    last.refresh_from_db()
    assert last.state == ReviewState.APPROVED
    assert not Activity.objects.filter(verb="contract.revoked", target__endswith=last.public_id)


# -- item 12: Berth's own defaults are no widening of a template's narrower start ------------


@pytest.fixture
def starter(client, cast) -> Token:
    """An agent (carol's token) that created `site` from the python-http starter
    (memory_mb 512, timeout_s 300, runc) through the API."""
    _, secret = cast.token(cast.carol)
    r = client.post(
        "/api/v1/workspaces",
        {"name": "Site", "slug": "site", "template": "python-http"},
        content_type="application/json",
        **Token(client, secret).headers,
    )
    assert r.status_code == 201, r.content
    return Token(client, secret, "site")


WITHOUT_SANDBOX = '[preview]\ncommand = "python3 app.py"\nport = 8000\n'


def test_a_starters_file_without_its_sandbox_lines_asks_for_no_more_than_the_defaults(
    starter,
):
    starter.write(WITHOUT_SANDBOX)
    r = starter.run()
    assert r.status_code == 202, r.content
    assert not ContractReview.objects.filter(state=ReviewState.PENDING).exists()
    assert starter.run(timeout_s=600).status_code == 202
    assert held(starter.run(timeout_s=601))["details"]["widened"][0]["key"] == "timeout_s"
    # Past Berth's defaults it is a widening, against them.
    starter.write("[sandbox]\nmemory_mb = 2048\n" + WITHOUT_SANDBOX)
    error = held(starter.run())
    assert "memory_mb raised from 1024 to 2048" in error["message"]
    starter.write("[sandbox]\ncpus = 2\n" + WITHOUT_SANDBOX)
    assert [w["key"] for w in held(starter.run())["details"]["widened"]] == ["cpus"]


def test_a_reviewers_narrowing_and_gvisor_still_hold_against_the_defaults(starter, cast, signed_in):
    site = Workspace.objects.get(slug="site")
    answer = type_in_editor(
        signed_in(cast.bob), site, '[sandbox]\nruntime = "gvisor"\nmemory_mb = 256\n'
    )
    assert answer["contract_review"]["state"] == "approved"
    starter.write(WITHOUT_SANDBOX)
    error = held(starter.run())
    assert [w["key"] for w in error["details"]["widened"]] == ["runtime", "memory_mb"]
    assert "memory_mb raised from 256 to 1024" in error["message"]
