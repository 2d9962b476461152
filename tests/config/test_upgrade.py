"""An existing install upgrades by `git pull && make run`.

A stack made on the main before the rooms moved (runner/ became runs/ and sandbox/, the
ground floor core/), with a live preview and a live release, is stopped as a person
stops `make run` and started again on this checkout with the same data, the way
`make run` starts it (`manage.py prepare`: migrations, then supervisord). Every row is
kept, the preview and the release keep serving from the very same containers, and the
runner agent's reconcile removes nothing.
"""

import os
import sqlite3
import stat
import subprocess
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urljoin

import pytest
from django.conf import settings

from tests.support.previews import Browser
from tests.support.servers import ROOT, wait_for
from tests.support.stacks import Stack, supervised_stack

pytestmark = pytest.mark.docker

# main before the structure issue: the last commit of the hardening issue.
BEFORE = "c2c40e654a4590dc37ed7f4f5e9bb654796a9d10"

APPROVE = """
from accounts import actions as accounts
from accounts.access import Actor
from accounts.models import Role, Team
from deploys import actions
from deploys.models import DeployRequest
team = Team.objects.get(slug="team-a")
bob, _ = accounts.create_user(team, "bob", Role.REVIEWER, None, password="bob-password-1")
actions.approve_deploy(DeployRequest.objects.get(public_id="{deploy}"), Actor(bob))
"""


def checkout(commit: str, dest: Path) -> Path:
    """The tree of `commit` in `dest`, with its own locked virtualenv (as a clone of it
    would have after `make venv`)."""
    if not (dest / ".venv/bin/python").exists():
        present = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", commit + "^{commit}"])
        assert present.returncode == 0, f"this clone lacks the history of {commit}"
        dest.mkdir(parents=True, exist_ok=True)
        tree = subprocess.run(
            ["git", "-C", str(ROOT), "archive", commit], capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=tree, check=True)
        uv = subprocess.run(
            [str(ROOT / "scripts/ensure-uv")], capture_output=True, text=True, check=True
        ).stdout.strip()
        python = subprocess.run(
            [str(ROOT / "scripts/find-python")], capture_output=True, text=True, check=True
        ).stdout.strip()
        subprocess.run(
            [uv, "sync", "--frozen", "--quiet", "--python", python],
            cwd=dest,
            env={**os.environ, "UV_PROJECT_ENVIRONMENT": str(dest / ".venv")},
            check=True,
            timeout=600,
        )
    return dest


def rows(stack: Stack) -> dict[str, set[tuple]]:
    """Every row of every Berth table, by table."""
    db = sqlite3.connect(f"file:{stack.data_dir / 'berth.sqlite3'}?mode=ro", uri=True, timeout=5)
    try:
        tables = [
            name
            for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            if name.split("_", 1)[0] in ("accounts", "workspaces", "runner", "previews", "deploys")
        ]
        return {t: {row[:1] for row in db.execute(f'SELECT * FROM "{t}"')} for t in tables}
    finally:
        db.close()


def containers(stack: Stack) -> set[str]:
    listed = subprocess.run(
        ["docker", "ps", "-aq", "--no-trunc", "--filter", f"label=berth.instance={stack.instance}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(listed.split())


def sandboxes(stack: Stack) -> dict[str, tuple[str, str, str]]:
    """Sandbox rows by name: (kind, owner id, state)."""
    db = sqlite3.connect(f"file:{stack.data_dir / 'berth.sqlite3'}?mode=ro", uri=True, timeout=5)
    try:
        return {
            name: (kind, owner, state)
            for name, kind, owner, state in db.execute(
                "SELECT name, kind, owner_id, state FROM sandbox_sandbox"
            )
        }
    finally:
        db.close()


def container_names(stack: Stack) -> set[str]:
    listed = subprocess.run(
        [
            "docker",
            "ps",
            "-a",
            "--format",
            "{{.Names}}",
            "--filter",
            f"label=berth.instance={stack.instance}",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(listed.split())


def serves(stack: Stack, preview: dict, release_url: str) -> None:
    """The preview (through a ticket link, as a teammate opens it) and the release (a
    public host) answer with the app's page."""
    browser = Browser(SimpleNamespace(port=stack.port, gateway_port=stack.preview_port))
    link = stack.api("POST", f"/previews/{preview['id']}/link").json()["url"]
    page = browser.get(urljoin(link, browser.open(link).headers["Location"]))
    assert page.status_code == 200 and "Hello, world!" in page.text, page.text[:300]
    public = Browser(SimpleNamespace(port=stack.port, gateway_port=stack.preview_port))
    page = public.get(release_url)
    assert page.status_code == 200 and "Hello, world!" in page.text, page.text[:300]


def test_an_install_made_before_the_rooms_moved_upgrades_keeping_rows_and_sandboxes():
    before = checkout(BEFORE, settings.DATA_DIR / "checkouts" / BEFORE[:12])
    with supervised_stack(settings.DATA_DIR / "stacks" / "upgrade", code=before) as stack:
        r = stack.api(
            "POST", "/workspaces", {"name": "Shop", "slug": "shop", "template": "python-http"}
        )
        assert r.status_code == 201, r.text
        r = stack.api("POST", "/workspaces/shop/previews", {})
        assert r.status_code == 202, r.text
        preview = wait_for(
            lambda: (
                (p := stack.api("GET", f"/previews/{r.json()['id']}").json())["state"]
                in ("ready", "failed", "stopped", "crashed")
                and p
            ),
            timeout=180,
            what="the preview to be ready",
        )
        assert preview["state"] == "ready", preview
        r = stack.api("POST", "/workspaces/shop/deploys", {"note": "before the upgrade"})
        assert r.status_code == 201, r.text
        stack.shell(APPROVE.format(deploy=r.json()["id"]))
        deploy = wait_for(
            lambda: (
                (d := stack.api("GET", f"/deploys/{r.json()['id']}").json())["state"]
                in ("live", "failed")
                and d
            ),
            timeout=300,
            what="the release to be live",
        )
        assert deploy["state"] == "live", deploy
        release_url = stack.api("GET", "/workspaces/shop/release").json()["url"]
        serves(stack, preview, release_url)
        # The preview's process and the release's: the build's container goes once its
        # end is written, which may be a moment after the deploy says live.
        kept_containers = wait_for(
            lambda: containers(stack),
            timeout=60,
            what="only the preview's and the release's containers",
            until=lambda found: len(found) == 2,
        )
        kept_rows = rows(stack)

        # git pull && make run: Ctrl-C, then this checkout's `manage.py prepare` and
        # supervisord on the same data.
        assert stack.interrupt() == 0
        db = stack.data_dir / "berth.sqlite3"
        assert db.stat().st_mode & 0o044, "the old checkout wrote it readable by others"
        stack.code = ROOT
        prepared = subprocess.run(
            [str(ROOT / ".venv/bin/python"), "manage.py", "prepare"],
            cwd=ROOT,
            env=stack.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert prepared.returncode == 0, prepared.stderr[-3000:]
        # prepare made the install private (docs/security.md 28).
        assert stat.S_IMODE(stack.data_dir.stat().st_mode) == 0o700
        assert stat.S_IMODE(db.stat().st_mode) == 0o600
        stack.start()
        # A run that ends after the restart: the agent's first reconcile is behind it.
        run = stack.wait_run(stack.run("shop", "echo upgraded"), timeout=180)
        assert run["state"] == "succeeded", run
        now = rows(stack)
        for table, ids in kept_rows.items():
            assert ids <= now[table], f"rows of {table} lost: {ids - now[table]}"
        # The run's own container goes once its end is written; the others stay.
        wait_for(
            lambda: containers(stack) == kept_containers,
            timeout=30,
            what=f"only the containers of before: {kept_containers}",
        )
        # Both kept containers were adopted by their names as Sandbox rows of their runs,
        # carried as running; the new run's sandbox was named from its row and is gone.
        boxes = sandboxes(stack)
        kept_names = container_names(stack)
        assert len(kept_names) == 2 and kept_names <= set(boxes), (kept_names, boxes)
        assert [boxes[n][0] for n in kept_names] == ["service", "service"], boxes
        assert [boxes[n][2] for n in kept_names] == ["running", "running"], boxes
        new = [b for n, b in boxes.items() if b[1] == run["id"]]
        assert [b[2] for b in new] == ["removed"], boxes
        assert stack.api("GET", f"/previews/{preview['id']}").json()["state"] == "ready"
        assert stack.api("GET", f"/deploys/{deploy['id']}").json()["state"] == "live"
        serves(stack, preview, release_url)
