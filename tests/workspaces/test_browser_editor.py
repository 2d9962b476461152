"""Editing a file in a real Chromium: the CodeMirror editor, Ctrl-S, and the commit."""

import json
import time
import urllib.request

import pytest

from tests.support.browser import chromium_page
from workspaces import history
from workspaces.models import Workspace
from workspaces.store import open_store

pytestmark = pytest.mark.browser


def test_alice_edits_app_py_in_the_browser_and_ctrl_s_commits_it(berth_server, cast):
    with chromium_page() as page:
        page.goto(f"{berth_server.url}/")
        page.fill("input[name=username]", "alice")
        page.fill("input[name=password]", "alice-password-1")
        page.click("button[type=submit]")
        page.wait_for_url("**/t/team-a/")

        page.fill("input[name=name]", "Shop")
        page.check("input[name=template][value=python-http]")
        page.click("text=Create workspace")
        page.wait_for_url("**/t/team-a/w/shop/")

        page.click(".tree a:text-is('app.py')")
        page.wait_for_url("**/w/shop/?ref=main&path=app.py")
        page.wait_for_selector(".cm-editor .cm-content")
        assert "def greeting" in page.inner_text(".cm-content")
        # Python highlighting: keywords and strings get token classes of their own.
        assert page.locator(".cm-content .cm-line span[class]").count() > 10

        page.click(".cm-content")
        page.keyboard.press("Control+End")
        page.keyboard.type("\n# Saved from the browser\n")
        assert page.is_visible("#dirty")
        page.fill("#commit-message", "Note where this was saved")
        page.click(".cm-content")
        page.keyboard.press("Control+s")
        page.wait_for_selector("#save-status.ok")
        assert "Saved as" in page.inner_text("#save-status")
        assert page.is_hidden("#dirty")

    workspace = Workspace.objects.get(slug="shop")
    with open_store(workspace) as store:
        head = store.branch_head("main")
        assert head
        commit = history.commit_summary(store, head)
        content = history.read_file(store, head, "app.py")["content"]
    assert commit["title"] == "Note where this was saved"
    assert commit["author"]["name"] == "alice"
    assert content.endswith("\n# Saved from the browser\n")


def test_folders_open_in_place_and_a_moved_branch_keeps_the_users_text(berth_server, cast):
    from accounts.access import Actor
    from workspaces import actions
    from workspaces.changes import Change

    workspace = actions.create_workspace(
        cast.team_a, Actor(cast.alice), "Site", None, "static-site"
    )
    actions.commit_changes(
        workspace,
        Actor(cast.alice),
        [Change("write", "src/lib/util.js", b"export const x = 1;\n")],
        "Add util",
    )
    _, secret = cast.token(cast.bob)
    with chromium_page() as page:
        page.goto(f"{berth_server.url}/signin/?next=/t/team-a/w/site/")
        page.fill("input[name=username]", "carol")
        page.fill("input[name=password]", "carol-password-1")
        # The workspace page's htmx is held back until a folder has been opened: a
        # quick click on a slow machine, before the deferred scripts ran, must still
        # load the folder (it once stayed open and empty).
        held: list = []
        page.route("**/htmx.min*.js", lambda route: held.append(route))
        page.click("button[type=submit]")
        page.wait_for_selector(".tree")
        page.click(".tree summary .name:text-is('src')")
        deadline = time.monotonic() + 15
        while not held and time.monotonic() < deadline:
            page.wait_for_timeout(20)  # lets Playwright deliver the held request
        assert held, "the workspace page never asked for htmx"
        held[0].continue_()
        page.unroute("**/htmx.min*.js")

        page.click(".tree summary .name:text-is('lib')")  # loaded by htmx, no page load
        page.click(".tree a:text-is('util.js')")
        page.wait_for_url("**/w/site/?ref=main&path=src/lib/util.js")
        page.wait_for_selector(".cm-content")

        # Bob's agent commits while carol edits: her save must not land, nor be lost. She
        # has typed first: with nothing unsaved the page would take his text as it
        # lands (static/js/watch.js), and her line would go on top of it.
        page.click(".cm-content")
        page.keyboard.press("Control+End")
        page.keyboard.type("// carol's line")
        page.wait_for_selector("#dirty", state="visible")
        request = urllib.request.Request(
            f"{berth_server.url}/api/v1/workspaces/site/files/src/lib/util.js",
            method="PUT",
            data=json.dumps({"content": "export const x = 2;\n"}).encode(),
            headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as r:
            assert r.status == 200
        page.click("#save")
        page.wait_for_selector("#save-status.error")
        assert "moved" in page.inner_text("#save-status")
        assert "carol's line" in page.inner_text(".cm-content")
        assert page.is_visible("#dirty")
        # Her line touches his (the line above it): an overlap, shown, not merged.
        assert "-export const x = 2;" in page.inner_text("#overlap .diff").replace("\n", "")

    with open_store(workspace) as store:
        head = store.branch_head("main")
        assert head
        assert (
            history.read_file(store, head, "src/lib/util.js")["content"] == "export const x = 2;\n"
        )
