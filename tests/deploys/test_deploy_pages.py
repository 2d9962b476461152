"""Deploy requests through the pages and the API, on the database alone (nothing here is
approved far enough to build: tests/deploys/test_deploys.py drives releases on the real stack)."""

import pytest
from django.conf import settings

from accounts.access import Actor
from accounts.models import Activity
from deploys import actions
from deploys.models import DeployRequest
from tests.support.api import bearer
from workspaces import actions as workspace_actions

PAGE = "/t/team-a/w/shop/deploys/"


@pytest.fixture
def shop(cast):
    return workspace_actions.create_workspace(
        cast.team_a, Actor(cast.alice), "Shop", "shop", "python-http"
    )


@pytest.fixture
def asked(cast, shop) -> DeployRequest:
    token, _ = cast.token(cast.carol, ["deploy:request"])
    return actions.request_deploy(shop, Actor(cast.carol, token), note="please ship")


def test_reviewers_see_what_waits_on_the_dashboard_and_the_workspace_tabs(signed_in, cast, asked):
    bob = signed_in(cast.bob)
    dashboard = bob.get("/t/team-a/").content.decode()
    assert f'href="{PAGE}">Deploys to review <span class="badge pending-deploys"' in dashboard
    tabs = bob.get(PAGE).content.decode()
    assert 'title="1 deploy request waiting for a reviewer">1</span>' in tabs
    assert "1 waiting" in tabs and asked.public_id in tabs and "please ship" in tabs
    review = bob.get(f"{PAGE}{asked.public_id}/").content.decode()
    assert "Approve and release" in review and 'name="reason" required' in review
    assert "No run was made on this commit" in review  # nothing vouches for it
    assert "Nothing is live yet: every file is new" in review and "app.py" in review
    # carol asked (through her token): no approve button for her, only cancel.
    mine = signed_in(cast.carol).get(f"{PAGE}{asked.public_id}/").content.decode()
    assert "Approve and release" not in mine
    assert "You asked for this deploy: another reviewer must approve it." in mine
    assert "Cancel request" in mine


def test_a_failed_run_on_the_commit_is_shown_prominently(signed_in, cast, shop, asked):
    from runs.models import Run

    Run.objects.create(
        workspace=shop,
        ref="main",
        commit=asked.commit,
        command="pytest",
        image="berth-sandbox:bookworm",
        state="failed",
        reason="exit_nonzero",
    )
    review = signed_in(cast.bob).get(f"{PAGE}{asked.public_id}/").content.decode()
    assert 'role="alert" id="failed-runs">1 run on this commit did not succeed' in review


def test_a_team_may_require_two_distinct_approvers(signed_in, cast, asked):
    alice = signed_in(cast.alice)
    r = alice.post("/t/team-a/policies/approvals/", {"approvals_required": "2"}, follow=True)
    assert "Each deploy now needs 2 approvals." in r.content.decode()
    assert Activity.objects.filter(
        verb="team.policy_changed", detail__approvals_required=2
    ).exists()
    r = alice.post("/t/team-a/policies/approvals/", {"approvals_required": "0"}, follow=True)
    assert "Not saved: Deploys need between 1 and 10 approvals." in r.content.decode()
    assert (
        signed_in(cast.carol)
        .post("/t/team-a/policies/approvals/", {"approvals_required": "1"})
        .status_code
        == 403
    )

    page = signed_in(cast.bob).post(f"{PAGE}{asked.public_id}/approve/", follow=True)
    assert "Approvals: 1 of 2 — bob." in page.content.decode()
    asked.refresh_from_db()
    assert asked.state == "requested" and asked.build_run is None  # one is not enough
    again = signed_in(cast.bob).post(f"{PAGE}{asked.public_id}/approve/", follow=True)
    assert "You have approved this deploy already." in again.content.decode()
    asked.refresh_from_db()
    assert asked.approvals.count() == 1


def test_a_rejection_needs_a_reason_and_ends_the_request(signed_in, cast, asked):
    bob = signed_in(cast.bob)
    r = bob.post(f"{PAGE}{asked.public_id}/reject/", {"reason": "  "}, follow=True)
    assert "Say why it is rejected" in r.content.decode()
    r = bob.post(f"{PAGE}{asked.public_id}/reject/", {"reason": "tests fail"}, follow=True)
    asked.refresh_from_db()
    assert (asked.state, asked.decided_by) == ("rejected", cast.bob)
    assert asked.message == "Rejected by bob: tests fail"
    assert Activity.objects.filter(
        verb="deploy.rejected", user=cast.bob, detail__reason="tests fail"
    ).exists()
    r = bob.post(f"{PAGE}{asked.public_id}/approve/", follow=True)
    assert "This deploy is rejected; only a requested one can be approved." in r.content.decode()


def test_the_api_asks_lists_and_cancels_but_never_approves(client, cast, shop):
    _, secret = cast.token(cast.carol, ["workspace:read", "deploy:request"])
    r = client.post(
        "/api/v1/workspaces/shop/deploys",
        {"ref": "nope"},
        content_type="application/json",
        **bearer(secret),
    )
    assert r.status_code == 404 and r.json()["error"]["code"] == "ref_not_found"
    r = client.post(
        "/api/v1/workspaces/shop/deploys",
        {"note": "x", "approve": True},
        content_type="application/json",
        **bearer(secret),
    )
    assert r.status_code == 422  # unknown fields are refused, never acted on
    r = client.post(
        "/api/v1/workspaces/shop/deploys",
        {"note": "go"},
        content_type="application/json",
        **bearer(secret),
    )
    assert r.status_code == 201, r.content
    deploy = r.json()
    assert deploy["url"] == f"{settings.APP_URL}{PAGE}{deploy['id']}/"
    assert deploy["approvals_required"] == 1
    listed = client.get("/api/v1/workspaces/shop/deploys", **bearer(secret)).json()
    assert [d["id"] for d in listed] == [deploy["id"]]
    r = client.post(f"/api/v1/deploys/{deploy['id']}/approve", **bearer(secret))
    assert r.status_code == 404  # there is no such door
    # Without the scope: refused with the scope named.
    _, reader = cast.token(cast.carol, ["workspace:read"])
    r = client.post(
        "/api/v1/workspaces/shop/deploys", {}, content_type="application/json", **bearer(reader)
    )
    assert r.status_code == 403 and r.json()["error"]["code"] == "missing_scope"
    # Another member's token may not cancel carol's request; carol's may.
    _, bobs = cast.token(cast.bob, ["deploy:request"])
    r = client.post(f"/api/v1/deploys/{deploy['id']}/cancel", **bearer(bobs))
    assert r.status_code == 403 and r.json()["error"]["code"] == "not_requester"
    r = client.post(f"/api/v1/deploys/{deploy['id']}/cancel", **bearer(secret))
    assert r.json()["state"] == "cancelled"
    r = client.post(f"/api/v1/deploys/{deploy['id']}/cancel", **bearer(secret))
    assert r.status_code == 409
    live = client.get("/api/v1/workspaces/shop/release", **bearer(secret)).json()
    assert live == {
        "live": None,
        "url": f"http://shop--team-a.apps.localhost:{settings.PREVIEW_PORT}/",
    }


def test_a_workspace_without_a_deploy_command_says_what_to_add(client, cast):
    workspace_actions.create_workspace(cast.team_a, Actor(cast.alice), "Bare", "bare")
    _, secret = cast.token(cast.carol, ["deploy:request"])
    r = client.post(
        "/api/v1/workspaces/bare/deploys", {}, content_type="application/json", **bearer(secret)
    )
    assert r.status_code == 422 and r.json()["error"]["code"] == "no_deploy_command"
    assert "has no [deploy] command; add one" in r.json()["error"]["message"]
    assert not DeployRequest.objects.exists()


def test_a_member_asks_for_a_deploy_from_the_page(signed_in, cast, shop):
    carol = signed_in(cast.carol)
    r = carol.post(f"{PAGE}new/", {"ref": "main", "note": "from the page"}, follow=True)
    deploy = DeployRequest.objects.get()
    assert (deploy.requested_by, deploy.token, deploy.note) == (cast.carol, None, "from the page")
    assert r.redirect_chain[-1][0] == f"{PAGE}{deploy.public_id}/"
    assert "requested; a reviewer other than you approves it here" in r.content.decode()
    r = carol.post(f"{PAGE}new/", {"ref": "nope"}, follow=True)
    assert "No branch, tag or commit" in r.content.decode()
    assert DeployRequest.objects.count() == 1
    assert signed_in(cast.charlie).post(f"{PAGE}new/", {}).status_code == 404


def test_the_dashboard_says_what_is_going_on_in_each_workspace(signed_in, cast, shop, asked):
    from django.conf import settings

    from runs.models import Run

    for state in ("running", "queued", "succeeded"):
        Run.objects.create(
            workspace=shop,
            ref="main",
            commit=asked.commit,
            command="x",
            image=settings.SANDBOX_IMAGE,
            state=state,
        )
    page = signed_in(cast.carol).get("/t/team-a/").content.decode()
    assert ">2 runs going</a>" in page and "Deploys to review" in page


def test_a_latin_1_file_is_reviewed_as_text_not_binary(signed_in, cast, shop):
    workspace_actions.commit_changes(
        shop,
        Actor(cast.alice),
        [workspace_actions.Change("write", "menu.txt", "Caf\u00e9 cr\u00e8me\n".encode("latin-1"))],
        "A latin-1 menu",
    )
    token, _ = cast.token(cast.carol, ["deploy:request"])
    asked = actions.request_deploy(shop, Actor(cast.carol, token))
    review = signed_in(cast.bob).get(f"{PAGE}{asked.public_id}/").content.decode()
    assert "Caf\u00e9 cr\u00e8me" in review
    assert "Binary file; not shown." not in review


def test_self_approval_is_a_team_policy_and_needs_a_confirmation(signed_in, cast, shop):
    token, _ = cast.token(cast.bob, ["deploy:request"])
    mine = actions.request_deploy(shop, Actor(cast.bob, token))
    bob = signed_in(cast.bob)
    bob.post(f"{PAGE}{mine.public_id}/approve/", {"confirm_own": "yes"})
    mine.refresh_from_db()
    assert mine.state == "requested"
    r = signed_in(cast.alice).post(
        "/t/team-a/policies/approvals/",
        {"approvals_required": "1", "allow_self_approval": "on"},
        follow=True,
    )
    assert "may approve it, confirming it" in r.content.decode()
    assert Activity.objects.filter(detail__allow_self_approval=True).exists()
    page = bob.get(f"{PAGE}{mine.public_id}/").content.decode()
    assert 'name="confirm_own" value="yes" required' in page
    r = bob.post(f"{PAGE}{mine.public_id}/approve/", follow=True)  # not confirmed
    assert "confirm that you approve your own request" in r.content.decode()
    mine.refresh_from_db()
    assert mine.state == "requested"
    with_callbacks = bob.post(f"{PAGE}{mine.public_id}/approve/", {"confirm_own": "yes"})
    assert with_callbacks.status_code == 302
    mine.refresh_from_db()
    assert mine.state == "building"
    assert Activity.objects.filter(verb="deploy.approved", detail__self_approved=True).exists()
