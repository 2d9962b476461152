"""What runs under an approval that lapses (issue 32, item 5): a session, a preview and
a run whose contract today's approvals no longer admit are stopped, said why (the session's
files kept); a session that asks
for no more than what is still approved goes on (runs.lapses says why stopping is the
choice). And a session's commit approves nothing (item 6): a reviewer committing what
an agent wrote into workspace.toml leaves its widening held. Real stack, runc: the
choice is Berth's (a database decision and a stop through the runner agent), the same
for either runtime, so one runtime shows it."""

import pytest

from runs.models import Run
from sessions.models import Session
from tests.support.contracts import Token, held
from tests.support.previews import PreviewAgent
from tests.support.servers import wait_for
from workspaces.models import ContractReview, ReviewState

pytestmark = pytest.mark.docker

STARTER_SANDBOX = '[sandbox]\nruntime = "runc"\nmemory_mb = 512\ntimeout_s = 300\n'
PREVIEW = '\n[preview]\ncommand = "python3 -m http.server 8000"\nport = 8000\n'
WIDE = STARTER_SANDBOX + '\n[network]\negress = ["*.example.com"]\n' + PREVIEW
NARROW = STARTER_SANDBOX.replace("memory_mb = 512", "memory_mb = 256")


def test_a_revoked_approval_stops_what_it_no_longer_admits_not_the_other_session(
    agent, cast, client, signed_in, berth_server
):
    # The wider contract is held for the session, then approved by bob on its page.
    agent.write("workspace.toml", WIDE)
    error = held(agent.post("/workspaces/shop/sessions", {"runtime": "runc"}))
    review = ContractReview.objects.get(public_id=error["details"]["review"])
    assert signed_in(cast.bob).post(review.url + "approve/").status_code == 302
    wide = agent.ready(runtime="runc")
    # A branch that asks for less than both the approval and the starter's contract.
    r = agent.post("/workspaces/shop/branches", {"name": "small", "from": "main"})
    assert r.status_code == 201, r.content
    r = agent.put("/workspaces/shop/files/workspace.toml", {"content": NARROW, "branch": "small"})
    assert r.status_code == 200, r.content
    small = agent.ready(runtime="runc", ref="small")
    runs = {s["id"]: Session.objects.get(public_id=s["id"]).run for s in (wide, small)}
    assert {run.contract_review_id for run in runs.values()} == {review.pk}
    # A preview of the wide contract runs under the same approval.
    _, secret = cast.token(cast.carol)
    previews = PreviewAgent(client, secret, "shop")
    preview = previews.wait(previews.start(), {"ready"}, timeout=180)
    # And a run, going on.
    r = Token(client, secret).post("/workspaces/shop/runs", {"command": "sleep 300"})
    assert r.status_code == 202, r.content
    long_run = Run.objects.get(public_id=r.json()["id"])
    assert long_run.contract_review_id == review.pk

    r = signed_in(cast.bob).post(review.url + "revoke/", {"note": "no wildcard"})
    assert r.status_code == 302
    stopped = agent.wait_state(wide, "stopped", timeout=120)
    assert stopped["reason"] == "contract_lapsed", stopped
    assert (
        "approval of its sandbox contract lapsed (bob narrowed or revoked it)"
        in (stopped["message"])
    )
    ended = previews.wait(preview, {"stopped"})
    assert ended["reason"] == "contract_lapsed", ended
    assert "approval of its sandbox contract lapsed (bob narrowed" in ended["message"]
    cancelled = wait_for(
        lambda: Run.objects.filter(pk=long_run.pk, state="cancelled").first(),
        120,
        what="the run under the revoked approval to end",
    )
    assert cancelled.reason == "contract_lapsed", (cancelled.reason, cancelled.message)
    assert "approval of its sandbox contract lapsed (bob narrowed" in cancelled.message
    run = wait_for(
        lambda: Run.objects.filter(pk=runs[wide["id"]].pk, state="cancelled").first(),
        60,
        what="the wide session's run to end",
    )
    assert run.stop_requested_by == "bob"
    # The one within what is still approved goes on, and answers.
    assert agent.session(small)["state"] == "ready"
    done = agent.exec(small, "echo still here")
    assert done["exit_code"] == 0, done
    # Opening the wide contract again waits for a new review.
    again = held(agent.post("/workspaces/shop/sessions", {"runtime": "runc"}))
    assert again["details"]["review"] != review.public_id
    assert ContractReview.objects.get(pk=review.pk).state == ReviewState.REVOKED


def test_a_reviewer_committing_a_sessions_widened_toml_approves_nothing(agent, cast, client):
    session = agent.ready(runtime="runc")
    # The agent widens the contract inside its session ...
    agent.exec(session, "printf '[sandbox]\\nmemory_mb = 3000\\n' > workspace.toml")
    # ... and bob, a reviewer, commits the session's changes with his own token.
    _, secret = cast.token(cast.bob)
    bob = Token(client, secret)
    r = bob.post(f"/sessions/{session['id']}/commit", {"message": "from the session"})
    assert r.status_code == 201, r.content
    assert r.json()["files"] == ["workspace.toml"]
    error = held(bob.run())
    review = ContractReview.objects.get(public_id=error["details"]["review"])
    assert (review.state, review.source) == (ReviewState.PENDING, "asked")
    assert not review.approvals.exists()
