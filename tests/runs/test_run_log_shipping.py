"""A run's log is the web host's: a runner host's agent formats its entries and sends them
through the internal API (logs.shipped → runs.host_api, sessions.host_api), through the
real daphne. A batch is kept once however often it is sent, a batch out of turn is told
where the log's end is, a bad batch changes nothing, and no host writes or reads a log
that is not of its own runs. The agent's half (followers on host B, an agent restart on
B resuming its log) is tests/hosts/test_two_hosts.py; every run of the suite ships its
log the same way on this host."""

import pytest
import requests

from accounts.access import Actor
from logs import logstore, shipped
from logs.shipped import ShippedLog, exec_log, run_log
from sandbox import webapi
from sandbox.hosts import Host
from sessions.models import Exec
from tests.support.hosts import local_host
from tests.support.runs import make_run
from tests.support.sessions import session_row
from workspaces.actions import create_workspace

pytestmark = [pytest.mark.usefixtures("berth_server")]


@pytest.fixture
def run(cast, settings):
    local_host()
    shop = create_workspace(cast.team_a, Actor(cast.alice), "Shop", "shop")
    return make_run(shop, cast.alice, runner_host=settings.SANDBOX_HOST)


def post(server, path: str, token: str, body: dict) -> requests.Response:
    return requests.post(
        f"{server.url}/internal/v1{path}",
        json=body,
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )


def texts(log_id: str) -> list[str]:
    return [e["text"] for e in logstore.read(log_id, 0)]


def test_a_batch_is_kept_once_and_one_out_of_turn_is_told_where_the_end_is(
    berth_server, run, settings
):
    path, token = run_log(run.public_id), settings.BERTH_HOST_TOKEN
    batch = [["stdout", "one", "2026-12-08T00:00:00.1Z"], ["stderr", "two", None]]
    first = post(berth_server, path, token, {"after": 0, "entries": batch})
    assert first.status_code == 200 and first.json() == {"count": 2}, first.text
    # Sent again (its answer was lost): kept once.
    again = post(berth_server, path, token, {"after": 0, "entries": batch})
    assert again.json() == {"count": 2}
    assert texts(run.public_id) == ["one", "two"]
    # A note went in meanwhile: a batch after 2 is told the end is at 3, and a
    # writer sending it goes on from there.
    assert shipped.note(path, "[berth] a note") == 3
    late = post(berth_server, path, token, {"after": 2, "entries": [["stdout", "x", None]]})
    assert late.status_code == 409, late.text
    assert late.json()["error"]["code"] == "log_moved"
    assert late.json()["error"]["details"] == {"count": 3}
    writer = ShippedLog(path)
    writer.sent = 2  # as a writer that had not heard of the note
    writer.append("stdout", b"three\n", "2026-12-08T00:00:00.2Z")
    assert writer.count == 4
    assert texts(run.public_id) == ["one", "two", "[berth] a note", "three"]
    assert [e["seq"] for e in logstore.read(run.public_id, 0)] == [1, 2, 3, 4]


def test_a_bad_batch_changes_nothing_and_says_which_entry(berth_server, run, settings):
    path, token = run_log(run.public_id), settings.BERTH_HOST_TOKEN
    too_long = "x" * (settings.RUN_LOG_MAX_LINE + 1)
    for entries, bad in (
        ([["stdout", "fine", None], ["elsewhere", "no", None]], 1),
        ([["stdout", too_long, None]], 0),
        ([["stdout", "fine", None], ["stdout", 7, None]], 1),
        ([["stdout", "fine"]], 0),
    ):
        refused = post(berth_server, path, token, {"after": 0, "entries": entries})
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["code"] == "invalid"
        assert refused.json()["error"]["details"] == {"entry": bad}
    garbled = requests.post(
        f"{berth_server.url}/internal/v1{path}",
        data=b"{not json",
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert garbled.status_code == 422 and garbled.json()["error"]["code"] == "invalid"
    assert logstore.count(run.public_id) == 0


def test_a_writer_resumes_from_what_the_web_host_holds(berth_server, run, settings):
    """As an agent restarting mid-run: the count, the last engine timestamp, the output
    held and its truncation come from the web host; a truncated log gets no second
    marker and no more output."""
    settings.RUN_LOG_MAX_BYTES = 10  # the web host's own cap is its settings', not read here
    path = run_log(run.public_id)
    with ShippedLog(path) as first:
        first.batching = True
        first.append("stdout", b"12345678\n", "2026-12-08T00:00:01Z")
        first.append("stdout", b"abcdef\n", "2026-12-08T00:00:02Z")
    assert texts(run.public_id) == ["12345678", "ab", "[output truncated after 10 bytes]"]
    again = ShippedLog(path)
    assert (again.count, again.last_ts, again.total_bytes, again.truncated) == (
        3,
        "2026-12-08T00:00:02Z",
        10,
        True,
    )
    again.append("stdout", b"more\n", "2026-12-08T00:00:03Z")
    again.append_system("killed: timeout")
    again.close()
    assert texts(run.public_id)[-1] == "killed: timeout" and logstore.count(run.public_id) == 4
    assert shipped.count(path) == 4
    assert [e["text"] for e in shipped.tail(path, 2)] == [
        "[output truncated after 10 bytes]",
        "killed: timeout",
    ]


def test_a_big_flush_goes_in_batches_under_the_request_cap(berth_server, run, settings):
    path = run_log(run.public_id)
    line = "é" * (settings.RUN_LOG_MAX_LINE // 2 - 4)  # 16 KB of UTF-8: one entry each
    with ShippedLog(path) as writer:
        writer.batching = True
        for n in range(200):  # ~3 MB: more than one batch of shipped.BATCH_BYTES
            writer.append("stdout", f"{n} {line}\n".encode(), None)
    assert logstore.count(run.public_id) == 200
    assert [e["text"].split(" ")[0] for e in logstore.read(run.public_id, 0, 200)] == [
        str(n) for n in range(200)
    ]


def test_no_host_writes_or_reads_the_log_of_another_hosts_run_or_exec(
    berth_server, run, cast, settings
):
    other = Host.objects.create(name="b").issue_token()
    session = session_row(run.workspace, requested_by=cast.alice, runner_host="local")
    row = Exec.objects.create(session=session, command="true", timeout_s=60)
    for path in (run_log(run.public_id), exec_log(row.public_id)):
        body = {"after": None, "entries": [["system", "forged", None]]}
        refused = post(berth_server, path, other, body)
        assert refused.status_code == 404, refused.text
        for read in (path, f"{path}/cursor", f"{path}?tail=5"):
            got = requests.get(
                f"{berth_server.url}/internal/v1{read}",
                headers={"Authorization": f"Bearer {other}"},
                timeout=30,
            )
            assert got.status_code == 404, got.text
        # Its own host's token: written.
        assert post(berth_server, path, settings.BERTH_HOST_TOKEN, body).status_code == 200
    assert texts(run.public_id) == ["forged"] and texts(row.public_id) == ["forged"]


def test_a_web_host_that_never_answers_ends_the_flush_typed(run, settings, monkeypatch):
    """Waited for up to SHIP_PATIENCE_S (the engine keeps the output meanwhile), then
    said: never a batch dropped in silence."""
    writer = ShippedLog(run_log(run.public_id))
    monkeypatch.setattr(shipped, "SHIP_PATIENCE_S", 1.0)
    settings.BERTH_WEB_URL = "http://127.0.0.1:9"  # discard: nothing answers
    writer.web = webapi.client()
    writer.batching = True
    writer.append("stdout", b"lost?\n", None)
    with pytest.raises(webapi.WebUnavailable):
        writer.flush()
    assert writer._pending == [("stdout", "lost?", None)]  # kept, for a later flush


def test_text_that_is_no_unicode_keeps_nothing_of_its_batch(berth_server, run, settings):
    path, token = run_log(run.public_id), settings.BERTH_HOST_TOKEN
    body = b'{"after": 0, "entries": [["stdout", "fine", null], ["stdout", "\\ud800", null]]}'
    refused = requests.post(
        f"{berth_server.url}/internal/v1{path}",
        data=body,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        timeout=30,
    )
    assert refused.status_code == 422, refused.text
    assert logstore.count(run.public_id) == 0


def test_a_log_past_what_any_runs_could_be_takes_nothing_more(data_dir, settings):
    """The web host's own bound, whatever a runner host sends."""
    settings.RUN_LOG_MAX_BYTES = 0  # the bound: 4 MiB of room for notes
    with logstore.LogWriter("big1") as writer:
        writer.batching = True
        for _ in range(300):
            writer.append_system("x" * 16_000)
    with pytest.raises(logstore.Full):
        logstore.store("big1", None, [("system", "one more", None)])
    assert logstore.count("big1") == 300
