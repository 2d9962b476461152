"""A release under an approval that lapses (issue 32, item 5; docs/security.md 29), on
the real stack (daphne, Celery worker, runner agent, Docker; runc: the decision is
Berth's, the stop and the start the runner agent's ordinary ones).

A live release whose contract today's approvals no longer admit is stopped, said why,
and Berth's own restore does not start it again under the lapsed approval: it is
refused as a new ask would be, names the review to approve, and serves again once that
review is approved. A rollback to a release whose contract is no longer approved is
refused the same way; a release asking for no more than what is still approved goes on.
"""

import pytest

from accounts.access import Actor
from accounts.models import Activity
from deploys.models import Release
from tests.support.contracts import approve_on_page, held
from tests.support.deploys import TOML, app, released, served
from tests.support.previews import write
from tests.support.servers import wait_for
from workspaces import actions as workspace_actions
from workspaces.models import ContractReview, ReviewState

pytestmark = pytest.mark.docker

WIDE = TOML + '\n[network]\negress = ["*.example.com"]\n'


@pytest.fixture
def shop(cast):
    """Release one asks for egress to *.example.com, wider than the python-http
    starter's contract (approved at creation): a deploy of it waits for a review. A
    member writes it, so that neither reviewer is its writer (who may not approve it)."""
    workspace = workspace_actions.create_workspace(
        cast.team_a, Actor(cast.alice), "Shop", "shop", "python-http"
    )
    write(workspace, cast.carol, {"app.py": app("release one"), "workspace.toml": WIDE})
    return workspace


def approved_wide(agent, signed_in, cast) -> ContractReview:
    """The agent's ask is held for the wider contract; bob approves it on its page."""
    r = agent.client.post(
        "/api/v1/workspaces/shop/deploys", {}, content_type="application/json", **agent.headers
    )
    review = ContractReview.objects.get(public_id=held(r)["details"]["review"])
    approve_on_page(signed_in(cast.bob), review)
    return review


def live(agent) -> dict:
    r = agent.client.get("/api/v1/workspaces/shop/release", **agent.headers)
    assert r.status_code == 200, r.content
    return r.json()["live"]


def test_a_live_release_under_a_revoked_approval_stops_and_is_not_restored_until_approved(
    agent, cast, shop, signed_in, berth_server
):
    wide = approved_wide(agent, signed_in, cast)
    released(agent, signed_in, cast, "one")
    assert served(berth_server).text == "release one"
    release = Release.objects.select_related("process__run").get(number=1)
    assert release.process is not None and release.process.run is not None
    run = release.process.run

    r = signed_in(cast.bob).post(wide.url + "revoke/", {"note": "no wildcard"})
    assert r.status_code == 302
    # Stopped at the revocation, as docs/security.md 29 chooses (not kept until it ends).
    stop = Activity.objects.get(
        verb="preview.stopped", target=f"preview:{release.process.public_id}"
    )
    assert stop.detail["reason"] == "contract_lapsed"
    # Berth's restore (the agent's safety net, as after a crash) asks again as a new ask
    # would: refused, typed, and the route's process says what to do.
    refused = wait_for(
        lambda: live(agent),
        60,
        interval=0.2,
        what="the release's restore to be refused",
        until=lambda now: now["reason"] == "contract_change_pending",
    )
    assert (refused["release"], refused["state"]) == (1, "stopped"), refused
    again = ContractReview.objects.get(workspace=shop, state=ReviewState.PENDING)
    assert again.public_id != wide.public_id and again.asked_for == "a release's restart"
    assert refused["message"].startswith("Release 1 was not started again: This asks for more")
    assert "approve it at http" in refused["message"] and again.url in refused["message"]
    assert "*.example.com" in refused["message"]
    assert refused["message"].endswith(
        "Once it is approved there, Berth starts this release again."
    )
    # The stop asked at the revocation reaches the container at the agent's next step,
    # which a loaded machine may hold past the refused restore (CI at 28980ab).
    wait_for(
        lambda: served(berth_server).status_code != 200,
        30,
        interval=0.2,
        what="the stopped release to stop serving",
    )
    page = signed_in(cast.carol).get("/t/team-a/w/shop/deploys/").content.decode()
    assert "Not serving now: Release 1 was not started again" in page
    assert f'{again.url}" rel="nofollow">' in page  # the review, a link

    # It keeps being asked, never started: no new process, the refusal recorded once.
    wait_for(
        lambda: Release.objects.get(pk=release.pk).restorations >= 2,
        60,
        interval=0.2,
        what="a second refused restore",
    )
    release.process.refresh_from_db()
    assert release.process.run_id == run.pk and release.process.state == "stopped"
    run.refresh_from_db()
    assert run.state == "cancelled"  # the one process it had, stopped at the lapse
    refusals = Activity.objects.filter(verb="deploy.restore_refused")
    assert [(a.detail["review"], a.detail["reason"]) for a in refusals] == [
        (again.public_id, "contract_change_pending")
    ]

    # A reviewer approves it again: the same release serves again, no new build.
    approve_on_page(signed_in(cast.bob), again)
    wait_for(
        lambda: served(berth_server).status_code == 200,
        120,
        interval=0.2,
        what="the release to serve again once its contract is approved",
    )
    assert served(berth_server).text == "release one"
    back = live(agent)
    assert (back["release"], back["state"], back["restored_at"] is not None) == (1, "ready", True)
    assert Release.objects.count() == 1


def test_a_rollback_to_a_release_whose_approval_lapsed_is_refused_and_the_live_one_goes_on(
    agent, cast, shop, signed_in, berth_server
):
    wide = approved_wide(agent, signed_in, cast)
    released(agent, signed_in, cast, "one")
    # Release two asks for no egress: within the starter's contract.
    write(shop, cast.carol, {"app.py": app("release two"), "workspace.toml": TOML})
    released(agent, signed_in, cast, "two")
    assert served(berth_server).text == "release two"

    r = signed_in(cast.bob).post(wide.url + "revoke/", {"note": "no wildcard"})
    assert r.status_code == 302
    # Asking for no more than what is still approved, release two goes on.
    assert (live(agent)["release"], live(agent)["state"]) == (2, "ready")
    assert served(berth_server).text == "release two"

    # Rolling back to release one would run the revoked contract again: refused.
    page = signed_in(cast.bob).post("/t/team-a/w/shop/releases/1/rollback/", follow=True)
    text = page.content.decode()
    again = ContractReview.objects.get(workspace=shop, state=ReviewState.PENDING)
    assert again.asked_for == "a rollback to release 1" and again.requested_by == cast.bob
    assert "Release 1 was not rolled back to: This asks for more than workspace shop" in text
    assert "approve it at http" in text and again.url in text
    assert "Once it is approved, roll back again." in text
    refusal = Activity.objects.get(verb="deploy.rollback_refused")
    assert refusal.user == cast.bob
    assert (refusal.detail["reason"], refusal.detail["review"]) == (
        "contract_change_pending",
        again.public_id,
    )
    assert Release.objects.count() == 2  # no release was made for it
    assert (live(agent)["release"], live(agent)["state"]) == (2, "ready")
    assert served(berth_server).text == "release two"

    # Approved by another reviewer (bob asked), the rollback goes through.
    approve_on_page(signed_in(cast.alice), again)
    page = signed_in(cast.bob).post("/t/team-a/w/shop/releases/1/rollback/", follow=True)
    text = page.content.decode()
    assert "Rolling back to release 1" in text, text[text.find("<main") :]
    wait_for(
        lambda: served(berth_server).text == "release one",
        120,
        interval=0.2,
        what="the rollback to serve release one",
    )
    rolled = Release.objects.get(number=3)
    assert rolled.rollback_of is not None and rolled.rollback_of.number == 1
    assert rolled.process is not None and rolled.process.run is not None
    assert rolled.process.run.contract_review_id == again.pk
