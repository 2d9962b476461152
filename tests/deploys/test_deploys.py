"""Deploys (issue 9) on the real stack: daphne, Celery worker, runner agent, Docker.

Agents may ask; only a signed-in human reviewer who did not ask may approve; the release
is built from exactly the approved commit, health-checked, switched in, and rolled back
without a rebuild.
"""

import threading

import pytest
import requests

from accounts.access import Actor
from accounts.models import Activity
from deploys.models import DeployRequest, Release
from tests.support.api import bearer
from tests.support.deploys import HOST, PAGE, TOML, app, approve, released, served
from tests.support.previews import write
from tests.support.servers import restart_engine, wait_for
from workspaces import actions as workspace_actions
from workspaces.store import open_store

pytestmark = pytest.mark.docker


@pytest.fixture
def shop(cast):
    workspace = workspace_actions.create_workspace(
        cast.team_a, Actor(cast.alice), "Shop", "shop", "python-http"
    )
    write(workspace, cast.alice, {"app.py": app("release one"), "workspace.toml": TOML})
    return workspace


def test_an_agent_asks_only_a_human_reviewer_approves_and_the_approved_commit_ships(
    agent, cast, shop, signed_in, berth_server, client
):
    deploy = agent.ask("ship the greeting")
    assert deploy["state"] == "requested" and deploy["requested_by"]["token"]
    with open_store(shop) as store:
        assert deploy["commit"] == store.branch_head("main")
    # No door for a token approves: not in the API's schema, not the page's action.
    schema = client.get("/api/v1/openapi.json").json()
    assert not [p for p in schema["paths"] if "approve" in p or "rollback" in p]
    r = client.post(f"{PAGE}{deploy['id']}/approve/", **agent.headers)
    assert r.status_code == 302 and r["Location"].startswith("/signin/")  # not a session
    # alice owns the token that asked; carol is a member; neither may approve.
    page = approve(signed_in, cast.alice, deploy).content.decode()
    assert "asked for by your token; another reviewer must approve it" in page
    page = approve(signed_in, cast.carol, deploy).content.decode()
    assert "Only a reviewer or an admin of team team-a may approve" in page
    assert agent.get(deploy)["state"] == "requested" and not Release.objects.exists()

    # A newer commit lands after the request: the approval still ships the asked one.
    write(shop, cast.carol, {"app.py": app("not approved yet")})
    page = signed_in(cast.bob).get(f"{PAGE}{deploy['id']}/").content.decode()
    assert "Approve and release" in page and "release one" in page  # the diff
    approve(signed_in, cast.bob, deploy)
    done = agent.wait(deploy)
    assert done["state"] == "live", done
    assert done["approvals"] == ["bob"] and done["release"] == 1
    assert done["timings"]["built_at"] and done["timings"]["live_at"]
    r = served(berth_server)
    assert r.status_code == 200 and r.text == "release one"
    live = client.get("/api/v1/workspaces/shop/release", **agent.headers).json()
    assert live["live"]["commit"] == deploy["commit"] and live["live"]["approved_by"] == ["bob"]
    assert live["url"].startswith(f"http://{HOST}")
    verbs = list(
        Activity.objects.filter(target=f"deploy:{deploy['id']}").values_list(
            "verb", "user__username"
        )
    )
    assert ("deploy.requested", "alice") in verbs and ("deploy.approved", "bob") in verbs
    # The build was a run like any other, and the release's image says what it holds.
    build = DeployRequest.objects.get(public_id=deploy["id"]).build_run
    assert build is not None and build.state == "succeeded" and build.purpose == "build"
    from sandbox.engine import engine

    labels = engine().images.get(Release.objects.get(number=1).image).labels
    assert (labels["berth.commit"], labels["berth.deploy"], labels["berth.build"]) == (
        deploy["commit"],
        deploy["id"],
        build.public_id,
    )


def test_a_failing_release_leaves_the_live_one_serving_and_rollback_needs_no_rebuild(
    agent, cast, shop, signed_in, berth_server
):
    released(agent, signed_in, cast, "one")
    write(shop, cast.carol, {"app.py": app("release two")})
    released(agent, signed_in, cast, "two")
    assert served(berth_server).text == "release two"

    write(shop, cast.carol, {"app.py": app("broken", health=500)})
    broken = agent.ask("three")
    approve(signed_in, cast.bob, broken)
    failed = agent.wait(broken)
    assert (failed["state"], failed["reason"]) == ("failed", "health_failed"), failed
    assert "still serves" in failed["message"]
    assert served(berth_server).text == "release two"

    r = signed_in(cast.bob).post("/t/team-a/w/shop/releases/1/rollback/", follow=True)
    assert "Rolling back to release 1" in r.content.decode()
    wait_for(
        lambda: served(berth_server).text == "release one",
        120,
        interval=0.2,
        what="the rollback to serve release one",
    )
    builds = DeployRequest.objects.exclude(build_run=None).count()
    assert builds == 3  # the rollback built nothing
    page = signed_in(cast.carol).get(PAGE).content.decode()
    assert "rollback to release 1" in page
    assert Activity.objects.filter(verb="deploy.rolled_back", user=cast.bob).exists()


def test_other_teams_see_nothing_and_a_request_is_approved_exactly_once(
    agent, cast, shop, signed_in, client
):
    deploy = agent.ask()
    charlie = signed_in(cast.charlie)
    assert charlie.get(f"{PAGE}{deploy['id']}/").status_code == 404
    assert charlie.post(f"{PAGE}{deploy['id']}/approve/").status_code == 404
    _, theirs = cast.token(cast.charlie, ["workspace:read", "deploy:request"])
    assert client.get(f"/api/v1/deploys/{deploy['id']}", **bearer(theirs)).status_code == 404

    # Two reviewers at once (or a double click): one approval moves it, one release.
    barrier = threading.Barrier(2)
    results = []

    def go(user):
        barrier.wait()
        results.append(approve(signed_in, user, deploy).content.decode())

    threads = [threading.Thread(target=go, args=(u,)) for u in (cast.bob, cast.bob)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert Release.objects.count() == 1
    assert sum("Approved: the release is being built" in r for r in results) == 1
    assert agent.wait(deploy)["state"] == "live"

    # A cancelled request cannot be approved afterwards.
    later = agent.ask()
    r = client.post(f"/api/v1/deploys/{later['id']}/cancel", **agent.headers)
    assert r.status_code == 200 and r.json()["state"] == "cancelled"
    page = approve(signed_in, cast.bob, later).content.decode()
    assert "This deploy is cancelled; only a requested one can be approved." in page
    assert Release.objects.count() == 1


def test_a_crashed_release_process_is_started_again_and_the_page_says_so(
    agent, cast, shop, signed_in, berth_server
):
    from sandbox.engine import engine

    released(agent, signed_in, cast, "one")
    release = Release.objects.select_related("process__run").get(number=1)
    assert release.process is not None and release.process.run is not None
    # Only deploys move a release's process: not the preview or run doors.
    _, member = cast.token(cast.carol, ["workspace:read", "preview", "run"])
    r = agent.client.post(f"/api/v1/previews/{release.process.public_id}/stop", **bearer(member))
    assert r.status_code == 409 and r.json()["error"]["code"] == "release_process"
    r = agent.client.post(f"/api/v1/runs/{release.process.run.public_id}/cancel", **bearer(member))
    assert r.status_code == 409 and r.json()["error"]["code"] == "not_a_run"
    assert served(berth_server).text == "release one"
    engine().containers.get(release.process.run.container_name).kill()

    def brought_back() -> bool:
        release.refresh_from_db()
        return bool(release.restored_at) and served(berth_server).status_code == 200

    wait_for(brought_back, 60, interval=0.2, what="the release to be brought back")
    assert served(berth_server).text == "release one"
    page = signed_in(cast.carol).get(PAGE).content.decode()
    assert "Started again after its process stopped" in page


@pytest.mark.alone  # restarts the shared dockerd
def test_after_an_engine_restart_the_live_release_is_served_again_within_a_minute(
    agent, cast, shop, signed_in, berth_server
):
    released(agent, signed_in, cast, "one")
    restart_engine()

    def served_again() -> requests.Response | None:
        release = Release.objects.get(number=1)
        try:
            answer = served(berth_server)
        except requests.RequestException:
            return None
        return answer if release.restored_at and answer.status_code == 200 else None

    answer = wait_for(served_again, 60, interval=0.5, what="the release to be served again")
    assert answer.text == "release one"
    page = signed_in(cast.carol).get(PAGE).content.decode()
    assert "Started again after its process stopped" in page


def test_a_team_only_release_opens_from_berth_with_a_ticket(
    agent, cast, shop, signed_in, berth_server
):
    from tests.support.previews import Browser

    released(agent, signed_in, cast, "one")
    assert served(berth_server).text == "release one"  # public by default
    r = signed_in(cast.alice).post(
        "/t/team-a/w/shop/releases/visibility/", {"team_only": "on"}, follow=True
    )
    assert "visible to the team only" in r.content.decode()
    assert Activity.objects.filter(
        verb="workspace.releases_visibility", user=cast.alice, detail__team_only=True
    ).exists()
    process = Release.objects.get(number=1).process
    assert process is not None
    anonymous = wait_for(  # the proxy caches what it knows for about a second
        lambda: served(berth_server),
        10,
        interval=0.2,
        what="the release to stop answering strangers",
        until=lambda answer: answer.status_code != 200,
    )
    assert anonymous.status_code == 302
    assert f"/previews/{process.public_id}/open" in anonymous.headers["Location"]
    # A member opens it from Berth: a single-use ticket for the release host's cookie.
    opened = signed_in(cast.carol).get(f"/previews/{process.public_id}/open")
    assert opened.status_code == 302 and opened["Location"].startswith(f"http://{HOST}")
    browser = Browser(berth_server)
    browser.open(opened["Location"])
    page = browser.get(f"http://{HOST}/")
    assert page.status_code == 200 and page.text == "release one"
    assert signed_in(cast.charlie).get(f"/previews/{process.public_id}/open").status_code == 404


def test_the_last_three_release_images_are_kept_and_older_ones_removed(
    agent, cast, shop, signed_in
):
    import docker

    from sandbox.engine import engine

    for n in range(1, 5):
        write(shop, cast.carol, {"app.py": app(f"release {n}")})
        released(agent, signed_in, cast, str(n))
    wait_for(  # pruned after the switch's commit
        lambda: Release.objects.get(number=1).image_removed_at is not None,
        20,
        interval=0.2,
        what="release 1's image to be removed",
    )
    with pytest.raises(docker.errors.ImageNotFound):
        engine().images.get(Release.objects.get(number=1).image)
    for n in (2, 3, 4):
        release = Release.objects.get(number=n)
        assert release.image_removed_at is None and engine().images.get(release.image)
    r = signed_in(cast.bob).post("/t/team-a/w/shop/releases/1/rollback/", follow=True)
    assert "Release 1&#x27;s image was removed (only the last 3 are kept)" in r.content.decode()
