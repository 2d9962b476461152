"""Sessions through the pages a person uses, without the engine: the Sessions tab, one
session's page (clocks, what survives, its commands), its buttons, and the team's
session maxima on the members page.

Sessions are opened through the form (their start's task is only sent after a commit
these tests never make) or written as rows: the pages must render without a sandbox.
"""

import json
import re
from html import unescape

import pytest

from accounts.access import Actor
from accounts.models import Activity
from logs.logstore import LogWriter
from sessions import actions
from sessions.models import Exec, Session, SessionPolicy, SessionState
from sessions.persistence import statement
from workspaces import actions as workspace_actions

SESSIONS = "/t/team-a/w/shop/sessions/"


@pytest.fixture
def shop(cast):
    return workspace_actions.create_workspace(
        cast.team_a, Actor(cast.carol), "Shop", "shop", "python-http"
    )


@pytest.fixture
def carol(signed_in, cast):
    return signed_in(cast.carol)


@pytest.fixture
def log_dir(settings, tmp_path):
    settings.DATA_DIR = tmp_path


def opened(carol, **form) -> Session:
    r = carol.post(SESSIONS, {"ref": "main", "runtime": "", **form})
    assert r.status_code == 302, r.content
    session = Session.objects.get()
    assert r["Location"] == f"{SESSIONS}{session.public_id}/"
    return session


def cells(html: str, key: str) -> list[str]:
    """The cells of one row of the persistence table, as text."""
    row = re.search(rf'<tr data-key="{key}">(.*?)</tr>', html, re.S)
    assert row, key
    found = re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row[1])
    return [unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in found]


def test_the_sessions_tab_opens_a_session_and_lists_it(carol, cast, shop):
    r = carol.get(SESSIONS)
    assert r.status_code == 200
    html = r.content.decode()
    assert 'aria-current="page">Sessions</a>' in html
    assert '<option value="main" selected>main (default)</option>' in html
    assert '<option value="gvisor">gVisor (runsc)</option>' in html
    assert "No sessions yet." in html
    assert "0 of 4 sessions live" in html

    session = opened(carol, runtime="gvisor")
    assert (session.ref, session.runtime, session.state) == ("main", "gvisor", "starting")
    assert session.requested_by == cast.carol
    assert Activity.objects.filter(verb="session.opened").exists()

    html = carol.get(SESSIONS).content.decode()
    assert f'href="{SESSIONS}{session.public_id}/"' in html
    assert '<span class="badge state-starting">starting</span>' in html
    assert "1 of 4 sessions live" in html


def test_a_branch_that_is_not_one_is_refused_and_so_is_a_team_past_its_limit(carol, cast, shop):
    r = carol.post(SESSIONS, {"ref": "nope", "runtime": ""})
    assert r.status_code == 422
    assert "Select a valid choice" in r.content.decode()
    none = {**SessionPolicy.defaults(), "max_sessions": 0}
    SessionPolicy.objects.create(team=cast.team_a, **none)
    r = carol.post(SESSIONS, {"ref": "main", "runtime": ""})
    assert r.status_code == 429
    assert "Team team-a has 0 live sessions, its limit" in r.content.decode()
    assert not Session.objects.exists()


def test_the_session_page_shows_its_state_clocks_and_what_survives_in_the_statements_words(
    carol, cast, shop
):
    session = opened(carol)
    r = carol.get(f"{SESSIONS}{session.public_id}/")
    assert r.status_code == 200
    html = r.content.decode()
    assert 'aria-current="page">Sessions</a>' in html
    assert '<div id="session-status" data-state="starting" data-reason="">' in html
    assert f'data-session-ws="/ws/sessions/{session.public_id}"' in html
    assert "Stops at" in html and "Freezes at" in html and "Deleted after" in html
    # The persistence statement, word for word.
    for key, item in statement(session).items():
        _, where, survives, kept = cells(html, key)
        assert (where, survives) == (item["where"], item["survives"])
        assert kept == ("yes" if item["kept_now"] else "no")
    assert cells(html, "home_and_tmp")[3] == "no"  # starting: nothing in a container yet
    # What its state allows; deleting asks first.
    assert ">Keep alive</button>" in html and ">Stop</button>" in html
    assert ">Start again</button>" not in html
    assert 'popovertarget="delete-session">Delete…</button>' in html
    assert f'action="{SESSIONS}{session.public_id}/exec/"' in html
    assert "No command yet in this session." in html


def test_a_command_from_the_page_is_recorded_and_its_item_follows_its_log(
    log_dir, carol, cast, shop
):
    session = opened(carol)
    page = f"{SESSIONS}{session.public_id}/"
    r = carol.post(f"{page}exec/", {"command": "echo hi"}, HTTP_HX_REQUEST="true")
    assert r.status_code == 201
    row = Exec.objects.get()
    assert (row.command, row.session, row.requested_by) == ("echo hi", session, cast.carol)
    html = r.content.decode()
    assert f'data-ws="/ws/execs/{row.public_id}/logs"' in html
    assert f'data-status-target="exec-status-{row.public_id}"' in html
    assert json.loads(r["HX-Trigger"]) == {"session-touched": {}}  # the clocks, again

    # Ended, it lists its output from the log store, escaped; the viewer is gone.
    with LogWriter(row.public_id) as w:
        w.append("stdout", b"hi <b>there</b>\n", None)
    row.mark_running(1)
    row.finish("exit_zero", "The command exited with code 0.", exit_code=0)
    html = carol.get(page).content.decode()
    assert '<span class="badge state-exit_zero">exit_zero</span>' in html
    assert '<div class="line stdout">hi &lt;b&gt;there&lt;/b&gt;</div>' in html
    assert "data-run-log" not in html
    item = carol.get(f"{page}execs/{row.public_id}/", HTTP_HX_REQUEST="true")
    assert item.status_code == 200
    assert f'id="exec-status-{row.public_id}"' in item.content.decode()


def test_a_command_in_a_stopped_session_says_to_start_it_again(carol, cast, shop):
    session = opened(carol)
    session.move(SessionState.STOPPED, (SessionState.STARTING,), reason="closed")
    r = carol.post(
        f"{SESSIONS}{session.public_id}/exec/", {"command": "ls"}, HTTP_HX_REQUEST="true"
    )
    assert r.status_code == 409
    assert (r["HX-Retarget"], r["HX-Reswap"]) == ("#exec-error", "innerHTML")
    assert "start it again" in r.content.decode()
    assert not Exec.objects.exists()


def test_the_buttons_stop_start_again_and_delete_after_asking(
    carol, cast, shop, django_capture_on_commit_callbacks
):
    session = opened(carol)
    page = f"{SESSIONS}{session.public_id}/"
    # A start that never got a container: its run ends at once (heard on commit), and
    # the session stops.
    with django_capture_on_commit_callbacks(execute=True):
        r = carol.post(f"{page}stop/", HTTP_HX_REQUEST="true")
    assert r.status_code == 200 and 'data-state="stopping"' in r.content.decode()
    html = carol.get(page, HTTP_HX_REQUEST="true").content.decode()  # as its signal asks
    assert '<div id="session-status" data-state="stopped" data-reason="closed">' in html
    assert ">Start again</button>" in html and ">Stop</button>" not in html
    assert cells(html, "uncommitted_files")[3] == "yes"

    r = carol.post(f"{page}start/")
    assert r.status_code == 302
    session.refresh_from_db()
    assert (session.state, session.starts) == ("starting", 2)

    with django_capture_on_commit_callbacks(execute=True):
        carol.post(f"{page}stop/")
    r = carol.post(f"{page}delete/", HTTP_HX_REQUEST="true")
    html = r.content.decode()
    assert 'data-state="deleted"' in html
    assert cells(html, "uncommitted_files")[3] == "no"
    assert "Delete…" not in html and ">Start again</button>" not in html
    assert carol.post(f"{page}explode/").status_code == 404


def test_another_teams_session_is_not_found_on_any_door(signed_in, cast, shop):
    session = actions.open_session(shop, Actor(cast.carol))
    charlie = signed_in(cast.charlie)
    page = f"{SESSIONS}{session.public_id}/"
    assert charlie.get(page).status_code == 404
    assert charlie.post(f"{page}exec/", {"command": "id"}).status_code == 404
    assert charlie.post(f"{page}stop/").status_code == 404
    # Under another workspace's address, even of the same team.
    workspace_actions.create_workspace(cast.team_a, Actor(cast.carol), "Other", "other")
    carol = signed_in(cast.carol)
    assert carol.get(f"/t/team-a/w/other/sessions/{session.public_id}/").status_code == 404
    session.refresh_from_db()
    assert session.state == SessionState.STARTING and not Exec.objects.exists()


def test_an_admin_sets_the_teams_session_maxima_on_the_members_page(signed_in, cast, client):
    alice, carol = signed_in(cast.alice), signed_in(cast.carol)
    html = alice.get("/t/team-a/members/").content.decode()
    assert 'id="session-policy"' in html
    assert 'name="max_sessions" type="number" min="0" max="20" value="4" required>' in html
    assert "This Berth's defaults" in html

    values = {
        "max_sessions": "2",
        "idle_freeze_s": "60",
        "idle_stop_s": "600",
        "lifetime_s": "3600",
        "retention_s": "86400",
    }
    r = alice.post("/t/team-a/policies/sessions/", values, follow=True)
    assert "Session maxima saved: at most 2 live at once." in r.content.decode()
    assert SessionPolicy.of(cast.team_a) == {k: int(v) for k, v in values.items()}
    assert Activity.objects.filter(verb="team.session_policy_changed").exists()
    html = carol.get("/t/team-a/members/").content.decode()
    assert 'name="max_sessions" type="number" min="0" max="20" value="2" required disabled>' in html
    assert "Set by an admin of the team." in html

    # Past the operator's ceiling: said, nothing saved; a member may not at all.
    too_long = {**values, "lifetime_s": "99999999"}
    r = alice.post("/t/team-a/policies/sessions/", too_long, follow=True)
    assert "lifetime_s is at most 604800 on this Berth" in r.content.decode()
    assert carol.post("/t/team-a/policies/sessions/", values).status_code == 403
    assert SessionPolicy.of(cast.team_a)["lifetime_s"] == 3600


def test_the_usage_page_counts_live_sessions_against_the_limit(signed_in, cast, shop):
    actions.open_session(shop, Actor(cast.carol))
    html = signed_in(cast.carol).get("/t/team-a/usage/").content.decode()
    assert re.search(r"Live sessions \(frozen ones count\)</th><td>1</td><td>4 ", html)


def test_the_workspace_page_opens_a_session_on_its_branch(carol, cast, shop):
    html = carol.get("/t/team-a/w/shop/").content.decode()
    assert 'data-open-session title="Open a session on main' in html
    assert f'<form class="preview-box" method="post" action="{SESSIONS}">' in html
    opened(carol)  # what the dock's form posts: the page's branch
