"""Runs through the pages a person uses: the Runs tab, a run's page, cancel, the dock.

Runs are rows made here (or queued through the form, whose task is only sent after a
commit that these tests never make): the pages must render without the engine.
"""

import pytest
from django.utils import timezone

from accounts.access import Actor
from accounts.models import Activity
from logs.logstore import LogWriter
from runs import views
from runs.models import Run, RunState
from tests.support.runs import RUNS, finished_run, head, make_run
from workspaces import actions as workspace_actions
from workspaces.models import Workspace


@pytest.fixture
def shop(cast) -> Workspace:
    return workspace_actions.create_workspace(
        cast.team_a, Actor(cast.carol), "Shop", "shop", "python-http"
    )


@pytest.fixture
def log_dir(settings, tmp_path):
    """Logs in a directory of the test's own (they are files, not rows to roll back)."""
    settings.DATA_DIR = tmp_path


@pytest.fixture
def carol(signed_in, cast):
    return signed_in(cast.carol)


def test_the_runs_tab_lists_recent_runs(carol, cast, shop):
    done = finished_run(shop, cast.carol, command="make check")
    queued = make_run(shop, cast.bob, command="echo <b>hi</b>")
    r = carol.get(RUNS)
    assert r.status_code == 200
    html = r.content.decode()
    assert 'aria-current="page">Runs</a>' in html
    assert f'href="{RUNS}{done.public_id}/"' in html and "make check" in html
    assert '<span class="badge state-failed">failed</span>' in html
    assert "<code>exit_nonzero</code>" in html and "(exit 3)" in html
    assert done.commit[:7] in html and "14.0 s" in html  # queued to finished
    assert f'href="{RUNS}{queued.public_id}/"' in html
    assert '<span class="badge state-queued">queued</span>' in html
    assert "echo &lt;b&gt;hi&lt;/b&gt;" in html and "<b>hi</b>" not in html
    assert "<td>bob<br>" in html and "<td>carol<br>" in html
    # The form: the default branch is the ref, the runtimes are offered.
    assert 'name="ref" class="mono" list="ref-choices" value="main"' in html
    assert '<option value="gvisor">' in html
    assert '<datalist id="ref-choices"><option value="main">' in html
    assert 'id="ref-select"' not in html  # the header's branch switcher has no use here


def test_the_run_page_shows_what_ran_how_it_ended_and_what_applied(carol, cast, shop):
    run = finished_run(shop, cast.carol)
    r = carol.get(f"{RUNS}{run.public_id}/")
    assert r.status_code == 200
    html = r.content.decode()
    assert "python3 -m unittest" in html
    assert f'href="/t/team-a/w/shop/commits/{run.commit}/"' in html
    assert '<span class="badge state-failed">failed</span>' in html
    assert 'exit code <strong class="mono">3</strong>' in html
    assert "The command exited with code 3; the log says why." in html
    assert "this server allows at most 2, so 2 applies." in html
    # Timings: each step, with how long it took after the one before.
    for step in (
        "Queued",
        "Picked up by a worker",
        "Source copied in",
        "Process started",
        "Finished",
    ):
        assert f"<th>{step}</th>" in html
    assert "+1.30 s" in html and "+12.3 s" in html
    # The phase bar: where the time went, as shares of the whole.
    assert (
        'class="phase-bar" role="img" aria-label="waiting 0.2 s, preparing 1.3 s, '
        'command 12.3 s"' in html
    )
    # Isolation, as the engine reported it.
    for label, value in [
        ("Runtime", "runsc"),
        ("User", "1000:1000"),
        ("Capabilities", "dropped ALL"),
        (
            "Seccomp",
            "berth-sandbox/runsc (sha256 0123456789ab), enforced by "
            "runsc --oci-seccomp (inside gVisor)",
        ),
        ("Read-only root", "yes"),
        ("Network", "none"),
        ("Process limit", "256"),
        ("Memory", "512 MB"),
    ]:
        assert f'<th>{label}</th><td colspan="2" class="mono">{value}</td>' in html
    assert '<th>Timeout</th><td colspan="2" class="mono">600 s</td>' in html
    # Ended: no Cancel button; the viewer still replays the log from the start.
    assert "Cancel run" not in html
    assert f'data-ws="/ws/runs/{run.public_id}/logs" data-after="0"' in html


def test_an_active_run_says_what_it_waits_for_and_offers_cancel(carol, cast, shop):
    run = make_run(shop, cast.carol)
    html = carol.get(f"{RUNS}{run.public_id}/").content.decode()
    assert "Waiting for admission; a slot is free, so any moment." in html
    Run.objects.filter(pk=run.pk).update(admitted_at=timezone.now())
    html = carol.get(f"{RUNS}{run.public_id}/").content.decode()
    assert '<span class="badge state-queued">queued</span>' in html
    assert "Waiting for a worker to pick the run up." in html
    assert "Shown once the sandbox is created." in html
    assert f'action="{RUNS}{run.public_id}/cancel/"' in html and "Cancel run" in html


def test_a_long_log_opens_near_its_end(log_dir, carol, cast, shop, monkeypatch):
    monkeypatch.setattr(views, "VIEW_LINES", 10)  # the viewer's cap, small for speed
    run = finished_run(shop, cast.carol)
    with LogWriter(run.public_id) as log:
        for i in range(15):
            log.append("stdout", f"line {i}".encode())
    html = carol.get(f"{RUNS}{run.public_id}/").content.decode()
    assert 'data-after="5"' in html
    assert "data-log-trimmed>Earlier lines are not shown here" in html


def test_htmx_gets_only_the_run_status(carol, cast, shop):
    run = finished_run(
        shop,
        cast.carol,
        state=RunState.SUCCEEDED,
        reason="exit_zero",
        exit_code=0,
        message="The command exited with code 0.",
    )
    r = carol.get(f"{RUNS}{run.public_id}/", headers={"HX-Request": "true"})
    assert r.status_code == 200 and "HX-Request" in r["Vary"]
    html = r.content.decode()
    assert html.lstrip().startswith('<div id="run-status" data-state="succeeded">')
    assert "The command exited with code 0." in html and "<html" not in html
    assert "data-run-log" not in html  # the log viewer stays as it is
    assert "HX-Request" in carol.get(f"{RUNS}{run.public_id}/")["Vary"]


def test_the_form_queues_a_run_of_the_branch_head_and_opens_its_page(
    carol, cast, shop, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as callbacks:
        r = carol.post(
            RUNS,
            {
                "command": "  python3 -m unittest -v ",
                "ref": "main",
                "runtime": "gvisor",
                "timeout_s": "30",
            },
        )
    run = Run.objects.get()
    assert r.status_code == 302 and r["Location"] == f"{RUNS}{run.public_id}/"
    assert (run.command, run.commit, run.runtime) == (
        "python3 -m unittest -v",
        head(shop),
        "gvisor",
    )
    assert run.limits["timeout_s"] == 30 and run.requested_by == cast.carol
    assert run.state == RunState.QUEUED
    # Admission (which sends the prepare task) and the activity feed: after the commit.
    assert len(callbacks) == 2
    assert Activity.objects.filter(verb="run.started", target=f"run:{run.public_id}").exists()
    page = carol.get(r["Location"]).content.decode()
    assert "python3 -m unittest -v" in page and "gVisor" not in page


@pytest.mark.parametrize(
    "data, field_error",
    [
        ({"command": "   "}, "This field is required."),
        ({"command": "true", "ref": "no-such-branch"}, "no-such-branch"),
        (
            {"command": "true", "timeout_s": "999999"},
            "is above this server&#x27;s maximum of 3600.",
        ),
        ({"command": "true", "runtime": "kata"}, "Select a valid choice."),
    ],
)
def test_a_refused_run_keeps_the_form_and_says_why(carol, shop, data, field_error):
    r = carol.post(RUNS, data)
    assert r.status_code == 422
    html = r.content.decode()
    assert field_error in html and 'class="field-error"' in html
    assert not Run.objects.exists()


def test_the_dock_starts_a_run_and_gets_its_viewer(carol, shop):
    page = carol.get("/t/team-a/w/shop/").content.decode()
    assert f'hx-post="{RUNS}"' in page and 'id="run-command"' in page
    assert 'name="ref" value="main"' in page
    r = carol.post(RUNS, {"command": "echo hi", "ref": "main"}, headers={"HX-Request": "true"})
    run = Run.objects.get()
    assert r.status_code == 201 and "HX-Request" in r["Vary"]
    html = r.content.decode()
    assert f'data-ws="/ws/runs/{run.public_id}/logs"' in html
    assert f'href="{RUNS}{run.public_id}/"' in html and "<html" not in html
    r = carol.post(RUNS, {"command": "", "ref": "main"}, headers={"HX-Request": "true"})
    assert r.status_code == 422 and 'class="error dock-error"' in r.content.decode()


def test_any_member_may_cancel_a_queued_run(signed_in, cast, shop):
    run = make_run(shop, cast.carol)
    bob = signed_in(cast.bob)
    r = bob.post(f"{RUNS}{run.public_id}/cancel/")
    assert r.status_code == 302 and r["Location"] == f"{RUNS}{run.public_id}/"
    run.refresh_from_db()
    assert (run.state, run.reason, run.message) == (
        "cancelled",
        "cancelled_by_user",
        "Cancelled by bob.",
    )
    assert run.finished_at is not None
    assert Activity.objects.filter(verb="run.cancelled", user=cast.bob).exists()
    html = bob.get(r["Location"]).content.decode()
    assert '<span class="badge state-cancelled">cancelled</span>' in html
    assert "Cancelled by bob." in html and "Cancel run" not in html
    # Again: it already ended, which is said, not an error.
    r = bob.post(f"{RUNS}{run.public_id}/cancel/", follow=True)
    assert r.status_code == 200 and "The run already ended (cancelled)." in r.content.decode()


def test_cancel_from_htmx_answers_the_new_status(carol, cast, shop):
    run = make_run(shop, cast.carol, state=RunState.PREPARING)
    r = carol.post(f"{RUNS}{run.public_id}/cancel/", headers={"HX-Request": "true"})
    assert r.status_code == 200
    assert r.content.decode().lstrip().startswith('<div id="run-status" data-state="cancelled">')


def test_charlie_gets_404_everywhere(signed_in, cast, shop):
    run = make_run(shop, cast.carol)
    charlie = signed_in(cast.charlie)
    for url in (RUNS, f"{RUNS}{run.public_id}/"):
        assert charlie.get(url).status_code == 404
        assert charlie.get(url, headers={"HX-Request": "true"}).status_code == 404
    assert charlie.post(RUNS, {"command": "id"}).status_code == 404
    assert charlie.post(f"{RUNS}{run.public_id}/cancel/").status_code == 404
    run.refresh_from_db()
    assert run.state == RunState.QUEUED and Run.objects.count() == 1


def test_a_run_is_only_found_under_its_own_workspace(carol, cast, shop):
    other = workspace_actions.create_workspace(cast.team_a, Actor(cast.carol), "Other", "other")
    run = make_run(shop, cast.carol)
    assert carol.get(f"/t/team-a/w/{other.slug}/runs/{run.public_id}/").status_code == 404
    assert carol.get(f"{RUNS}nosuchrun/").status_code == 404
    assert carol.post(f"/t/team-a/w/{other.slug}/runs/{run.public_id}/cancel/").status_code == 404
