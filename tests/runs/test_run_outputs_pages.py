"""What a run gives back, through the pages a person uses: its setup step, the files it
changed (with their diff), the artifacts it kept (downloaded through the page), the
names it was granted, a re-run from the page and how the replay compares.

Most runs here are rows made by the test (the pages render from the row alone); the
`docker` tests run real commands on the real stack, from the page's own forms.
"""

import hashlib
import io
import re
from datetime import timedelta

import pytest
from django.utils import timezone

from accounts.access import Actor
from accounts.models import Activity
from runs import actions, artifacts
from runs.models import Run, RunState, Secret
from runs.secrets import encrypt
from tests.support.runs import CHANGES, LIMITS, RUNS, finished_run, wait_ended, with_artifacts_toml
from workspaces import actions as workspace_actions
from workspaces.models import Workspace

ARTIFACT = b"built <b>here</b>\x00\xff"
SETUP = {
    "command": "python3 -m venv /deps/venv",
    "cache_key": ["requirements.txt"],
    "key": "abc123def4567890" * 4,
    "hit": True,
    "cache": "cachecache01",
}


@pytest.fixture
def shop(cast) -> Workspace:
    return workspace_actions.create_workspace(
        cast.team_a, Actor(cast.carol), "Shop", "shop", "python-http"
    )


@pytest.fixture
def carol(signed_in, cast):
    return signed_in(cast.carol)


@pytest.fixture
def data_dir(settings, tmp_path):
    """Artifacts are files, not rows to roll back: a directory of the test's own."""
    settings.DATA_DIR = tmp_path


def with_outputs(shop, cast, **fields) -> Run:
    run = finished_run(
        shop,
        cast.carol,
        **{
            "state": RunState.SUCCEEDED,
            "reason": "exit_zero",
            "exit_code": 0,
            "message": "The command exited with code 0.",
            "setup": SETUP,
            "changes": CHANGES,
            "artifact_paths": ["dist"],
            "log_entries": 4,
            "artifacts": [
                {
                    "path": "dist/out.txt",
                    "size": len(ARTIFACT),
                    "sha256": hashlib.sha256(ARTIFACT).hexdigest(),
                }
            ],
            "artifacts_refused": [
                {
                    "path": "dist/link",
                    "why": "a symlink: artifacts may only be regular files and folders",
                }
            ],
            "secret_names": ["API_KEY"],
            "env_names": ["GREETING"],
            **fields,
        },
    )
    artifacts.keep(run.public_id, "dist/out.txt", io.BytesIO(ARTIFACT))
    return run


def verdicts(html: str) -> dict[str, str]:
    """The comparison table as {label: "same" | "differs" | "info"}."""
    return {
        label: verdict
        for verdict, label in re.findall(
            r'<tr class="(same|differs|info)">\s*<th scope="row">([^<]+)</th>', html
        )
    }


def page(client, run: Run) -> str:
    r = client.get(f"{RUNS}{run.public_id}/")
    assert r.status_code == 200
    return r.content.decode()


def test_the_run_page_shows_what_the_run_changed_kept_and_was_granted(data_dir, carol, cast, shop):
    run = with_outputs(shop, cast)
    html = page(carol, run)
    # Setup: skipped on a hit, with its key, and the way to the caches.
    assert "python3 -m venv /deps/venv" in html
    assert "skipped — dependency cache hit (key <code" in html and "abc123def456…" in html
    assert 'href="/t/team-a/w/shop/caches/"' in html
    # Changes: what survives is said, the counts and lists, each file's diff.
    assert (
        "Files the run wrote are removed with its sandbox; these changes are all that "
        "is kept (committed only when asked)."
    ) in html
    assert "6 files changed" in html and "Not committed" in html
    for path in (
        "dist/out.txt",
        "app.py",
        "notes.md",
        "README.md",
        "old.txt → new.txt",
        "logo.png",
    ):
        assert f"<code>{path}</code>" in html, path
    assert '<span class="mark">-</span>    return &#x27;Hello&#x27;' in html
    assert '<span class="mark">+</span>    return &#x27;Howdy&#x27;' in html
    assert '<span class="mark">-</span>-- a/looks-like-a-header' in html
    assert html.count('<section class="file-diff">') == 3
    assert "built &lt;b&gt;here&lt;/b&gt;" in html and "<b>here</b>" not in html
    assert "<code>huge.iso</code> — larger than 10 MB" in html and "and 2 more" in html
    assert "Truncated" not in html
    # Artifacts: a download link through the page door, size and short sha256; refusals.
    sha = hashlib.sha256(ARTIFACT).hexdigest()
    assert f'href="{RUNS}{run.public_id}/artifacts/dist/out.txt" download' in html
    assert f'<code title="{sha}">{sha[:12]}…</code>' in html and "19\xa0bytes" in html
    assert "<code>dist/link</code> — a symlink" in html
    # Grants: names only.
    assert '<th>Secrets</th><td colspan="2" class="mono">API_KEY</td>' in html
    assert '<th>Env</th><td colspan="2" class="mono">GREETING</td>' in html
    # Nothing to compare with yet.
    assert "This run vs" not in html


@pytest.mark.parametrize(
    "setup, fields, says",
    [
        (
            {"hit": False, "key": "f" * 64},
            {"setup_done_at": timezone.now()},
            "ran — filled a new cache",
        ),
        (
            {"hit": False, "key": "f" * 64},
            {"state": RunState.FAILED, "reason": "setup_failed", "exit_code": 4},
            "failed — the command did not run",
        ),
        (
            {},
            {"state": RunState.ERROR, "reason": "image_missing", "exit_code": None},
            "not reached",
        ),
    ],
)
def test_the_setup_step_says_whether_it_ran(data_dir, carol, cast, shop, setup, fields, says):
    run = with_outputs(shop, cast, setup={"command": "make deps", **setup}, **fields)
    assert says in page(carol, run)


def test_an_artifact_downloads_byte_for_byte_through_the_page(data_dir, carol, cast, shop):
    run = with_outputs(shop, cast)
    r = carol.get(f"{RUNS}{run.public_id}/artifacts/dist/out.txt")
    assert r.status_code == 200 and b"".join(r) == ARTIFACT
    assert r["Content-Disposition"] == 'attachment; filename="out.txt"'
    assert r["Content-Type"] == "application/octet-stream"
    assert "sandbox" in r["Content-Security-Policy"]
    # Only what the run listed: never a folder, a refused link or a path made up.
    for path in ("dist", "dist/link", "../../secret_key", "dist/../dist/out.txt"):
        assert carol.get(f"{RUNS}{run.public_id}/artifacts/{path}").status_code == 404, path


def test_charlie_gets_404_for_the_outputs_and_the_rerun(data_dir, signed_in, cast, shop):
    run = with_outputs(shop, cast)
    charlie = signed_in(cast.charlie)
    assert charlie.get(f"{RUNS}{run.public_id}/artifacts/dist/out.txt").status_code == 404
    assert charlie.post(f"{RUNS}{run.public_id}/rerun/", {"env_GREETING": "hi"}).status_code == 404
    assert Run.objects.count() == 1


def test_after_retention_the_page_says_so_and_serves_nothing(data_dir, carol, cast, shop):
    run = with_outputs(shop, cast, outputs_expired_at=timezone.now() - timedelta(days=1))
    html = page(carol, run)
    assert "removed by retention on" in html
    assert "/artifacts/dist/out.txt" not in html and "dist/out.txt</span>" in html
    assert carol.get(f"{RUNS}{run.public_id}/artifacts/dist/out.txt").status_code == 404


def test_files_withheld_for_holding_a_secret_are_named_with_it(data_dir, carol, cast, shop):
    run = with_outputs(
        shop,
        cast,
        changes={
            **CHANGES,
            "tree": "a" * 40,
            "withheld": [{"path": "leaked.txt", "secrets": ["API_KEY"]}],
        },
    )
    html = page(carol, run)
    assert "<strong>Withheld:</strong>" in html
    assert "<code>leaked.txt</code> — API_KEY" in html
    assert "is not in the commit" in html


def test_committed_changes_link_to_their_commit_and_branch(data_dir, carol, cast, shop):
    run = with_outputs(
        shop,
        cast,
        commit_changes=True,
        changes_commit="c" * 40,
        changes={**CHANGES, "truncated": True},
    )
    html = page(carol, run)
    assert f'href="/t/team-a/w/shop/commits/{"c" * 40}/"' in html
    assert f"on branch <code>runs/{run.public_id}</code>" in html
    assert "Truncated" in html and "the commit has every change" in html


def test_an_active_run_says_when_its_outputs_come(carol, cast, shop):
    run = Run.objects.create(
        workspace=shop,
        ref="main",
        commit="0" * 40,
        command="make",
        image="x",
        requested_by=cast.carol,
        commit_changes=True,
        setup={"command": "make deps"},
    )
    html = page(carol, run)
    assert (
        f"Read back once the run ends, then committed to branch <code>runs/{run.public_id}" in html
    )
    assert "not decided yet" in html


def test_a_rerun_from_the_page_asks_for_the_env_values_again(
    data_dir, carol, cast, shop, django_capture_on_commit_callbacks
):
    # The limits the python-http template's approved contract gives a run: a replay
    # asks for exactly these again (workspaces.reviews).
    run = with_outputs(shop, cast, limits={**LIMITS, "timeout_s": 300})
    html = page(carol, run)
    assert f'action="{RUNS}{run.public_id}/rerun/"' in html
    assert '<input type="password" name="env_GREETING"' in html
    r = carol.post(f"{RUNS}{run.public_id}/rerun/", {"env_GREETING": ""})
    assert r.status_code == 422 and Run.objects.count() == 1
    html = r.content.decode()
    assert 'role="alert" id="rerun-error">A replay takes the same env names' in html
    assert "give values for GREETING" in html
    assert 'name="env_GREETING" autocomplete="off" spellcheck="false" aria-invalid="true"' in html
    Secret.objects.create(workspace=shop, name="API_KEY", ciphertext=encrypt("k"))
    with django_capture_on_commit_callbacks() as callbacks:
        r = carol.post(f"{RUNS}{run.public_id}/rerun/", {"env_GREETING": "hey there"})
    again = Run.objects.exclude(pk=run.pk).get()
    assert r.status_code == 302 and r["Location"] == f"{RUNS}{again.public_id}/"
    assert again.rerun_of == run and again.requested_by == cast.carol
    assert (again.env_names, again.secret_names) == (["GREETING"], ["API_KEY"])
    assert (again.commit, again.command, again.limits) == (run.commit, run.command, run.limits)
    assert len(callbacks) == 2  # admission (then the prepare task) and the activity feed
    assert "hey there" not in str(Run.objects.values())
    assert Activity.objects.filter(verb="run.rerun", target=f"run:{again.public_id}").exists()
    html = page(carol, again)
    assert f'This run vs <a href="{RUNS}{run.public_id}/">run {run.public_id}</a>' in html
    assert "the run this one replays" in html
    # The original points at its latest re-run.
    assert "its latest re-run" in page(carol, run)


def test_a_finished_rerun_shows_how_its_outcome_differs(data_dir, carol, cast, shop):
    first = with_outputs(shop, cast)
    again = finished_run(
        shop,
        cast.carol,
        rerun_of=first,
        commit=first.commit,
        command=first.command,
        env_names=["GREETING"],
        changes=CHANGES,
        artifacts=[{**first.artifacts[0], "sha256": "0" * 64}],
    )
    html = page(carol, again)
    assert (
        '<th scope="row">State</th><td class="mono">failed</td>'
        '<td class="mono">succeeded</td>' in html
    )
    assert "sha256 differs: dist/out.txt" in html
    rows = verdicts(html)
    for label in ("State", "Reason", "Exit code", "Artifacts", "Secrets"):
        assert rows[label] == "differs", label
    for label in ("Changed files", "Commit", "Command", "Runtime", "Limits", "Env names"):
        assert rows[label] == "same", label
    assert rows["Duration"] == "info"  # shown, never judged


def test_the_run_form_grants_secrets_and_asks_for_a_commit(
    carol, cast, shop, django_capture_on_commit_callbacks
):
    assert "This workspace has no secrets" in carol.get(RUNS).content.decode()
    for name in ("API_KEY", "DB_URL"):
        Secret.objects.create(workspace=shop, name=name, ciphertext=encrypt("v"))
    html = carol.get(RUNS).content.decode()
    assert '<input type="checkbox" name="secrets" value="API_KEY">' in html
    assert 'name="commit_changes"' in html and "runs/&lt;id&gt;" in html
    with django_capture_on_commit_callbacks():
        r = carol.post(
            RUNS,
            {"command": "make fmt", "ref": "main", "secrets": ["DB_URL"], "commit_changes": "on"},
        )
    run = Run.objects.get()
    assert r.status_code == 302
    assert (run.secret_names, run.commit_changes) == (["DB_URL"], True)
    r = carol.post(RUNS, {"command": "make", "secrets": ["NOPE"]})
    assert r.status_code == 422 and "NOPE is not one of the available choices" in r.content.decode()
    assert Run.objects.count() == 1


# -- on the real stack -------------------------------------------------------------------


@pytest.mark.docker
def test_a_real_run_shows_its_changes_diff_and_artifact_on_its_page(
    run_stack, signed_in, cast, shop
):
    with_artifacts_toml(shop, cast)
    carol = signed_in(cast.carol)
    r = carol.post(
        RUNS,
        {
            "command": "sed -i 's/Hello/Howdy/' app.py && mkdir -p dist"
            " && head -c 5000 /dev/urandom > dist/blob.bin",
            "ref": "main",
            "commit_changes": "on",
        },
    )
    assert r.status_code == 302, r.content
    run = wait_ended(r["Location"].rstrip("/").rsplit("/", 1)[-1])
    assert run.state == RunState.SUCCEEDED, (run.reason, run.message)
    html = carol.get(r["Location"]).content.decode()
    assert "ran — filled a new cache" in html
    assert '<span class="status modified">Modified</span>' in html and "<code>app.py</code>" in html
    assert "Howdy, {name or &#x27;world&#x27;}!" in html
    assert f'href="/t/team-a/w/shop/commits/{run.changes_commit}/"' in html
    assert f"on branch <code>runs/{run.public_id}</code>" in html
    link = f"{RUNS}{run.public_id}/artifacts/dist/blob.bin"
    assert f'href="{link}" download' in html
    blob = b"".join(carol.get(link))
    assert len(blob) == 5000
    assert hashlib.sha256(blob).hexdigest() == run.artifacts[0]["sha256"]
    assert run.artifacts[0]["sha256"][:12] in html
    assert carol.get(f"{RUNS}{run.public_id}/artifacts/app.py").status_code == 404
    assert signed_in(cast.charlie).get(link).status_code == 404


@pytest.mark.docker
def test_a_real_rerun_from_the_page_is_compared_with_the_original(run_stack, signed_in, cast, shop):
    with_artifacts_toml(shop, cast)
    first = actions.start_run(
        shop,
        Actor(cast.carol),
        "mkdir -p dist && echo $GREETING > dist/greeting.txt && echo $GREETING > greeting.txt",
        env={"GREETING": "hi"},
    )
    first = wait_ended(first.public_id)
    assert first.state == RunState.SUCCEEDED, (first.reason, first.message)
    carol = signed_in(cast.carol)
    url = f"{RUNS}{first.public_id}/"
    assert 'name="env_GREETING"' in carol.get(url).content.decode()
    assert carol.post(f"{url}rerun/").status_code == 422
    r = carol.post(f"{url}rerun/", {"env_GREETING": "hey"})
    assert r.status_code == 302
    again = wait_ended(r["Location"].rstrip("/").rsplit("/", 1)[-1])
    assert again.rerun_of == first and again.state == RunState.SUCCEEDED
    assert again.setup["hit"] is True  # the first run filled the cache
    html = carol.get(r["Location"]).content.decode()
    assert f'This run vs <a href="{url}">run {first.public_id}</a>' in html
    assert "sha256 differs: dist/greeting.txt" in html
    assert "same files, different content" in html
    rows = verdicts(html)
    for label in ("Commit", "Image", "Command", "Runtime", "Limits", "Env names", "State"):
        assert rows[label] == "same", label
    assert rows["Artifacts"] == rows["Changed files"] == rows["Setup"] == "differs"
    assert "skipped — dependency cache hit" in html
