"""Folders in the browser: renamed and deleted from the folder's page, each one commit
on the branch through the same write path as files."""

import pytest
from playwright.sync_api import expect

from accounts.access import Actor
from core.errors import NotFound
from tests.support.browser import chromium_page, sign_in_as
from workspaces import actions
from workspaces.changes import Change
from workspaces.store import open_store

pytestmark = pytest.mark.browser


@pytest.fixture
def shop(cast):
    workspace = actions.create_workspace(
        cast.team_a, Actor(cast.alice), "Shop", "shop", "python-http"
    )
    actions.commit_changes(
        workspace,
        Actor(cast.alice),
        [Change("write", "docs/a.md", b"A\n"), Change("write", "docs/deep/b.md", b"B\n")],
        "Docs",
    )
    return workspace


def head_and_paths(workspace) -> tuple[str, str, set[str]]:
    with open_store(workspace) as store:
        head = store.branch_head("main")
        assert head
        names = {e["path"] for e in store.list_dir(head, "")}
        return head, store.commit(head).message.decode().strip(), names


def test_a_folder_is_renamed_then_deleted_from_its_page(berth_server, cast, shop):
    before, _, _ = head_and_paths(shop)
    with chromium_page() as page:
        sign_in_as(page, berth_server, "carol", "/t/team-a/w/shop/")
        page.locator(".tree a.dir-page[data-path='docs']").click()
        page.wait_for_url("**path=docs")

        page.get_by_role("button", name="Rename folder").click()
        dialog = page.locator("#rename-folder")
        # The dialog's opening (a queued toggle event) puts the caret at the end of its
        # field: filled before that, a loaded machine made "docsguides" of it.
        new_path = dialog.get_by_label("New path")
        expect(new_path).to_be_focused()
        new_path.fill("guides")
        dialog.get_by_role("button", name="Rename").click()
        page.wait_for_url("**path=guides")
        expect(page.locator(".messages")).to_contain_text("Rename folder docs to guides")
        expect(page.locator(".tree summary .name", has_text="guides")).to_be_visible()
        renamed, message, names = head_and_paths(shop)
        assert message == "Rename folder docs to guides"
        assert "guides" in names and "docs" not in names
        with open_store(shop) as store:
            assert store.commit(renamed).parents == [before.encode()]  # one commit
            store.lookup(renamed, "guides/deep/b.md")

        # A path the rules refuse is said in the dialog; nothing is committed.
        page.get_by_role("button", name="Rename folder").click()
        expect(new_path).to_be_focused()
        new_path.fill(".git")
        dialog.get_by_role("button", name="Rename").click()
        expect(dialog.locator(".form-error")).to_contain_text(".git")
        assert head_and_paths(shop)[0] == renamed
        dialog.get_by_role("button", name="Cancel").click()

        page.get_by_role("button", name="Delete folder").click()
        page.locator("#delete-folder").get_by_role("button", name="Delete folder").click()
        expect(page.locator(".messages")).to_contain_text("Delete folder guides")
        deleted, message, names = head_and_paths(shop)
        assert message == "Delete folder guides" and "guides" not in names
        with open_store(shop) as store:
            assert store.commit(deleted).parents == [renamed.encode()]
            with pytest.raises(NotFound):
                store.lookup(deleted, "guides/a.md")


DROP = """async ([selector, files]) => {
    const transfer = new DataTransfer();
    for (const [name, size, text] of files) {
        transfer.items.add(new File([text !== null ? text : new Uint8Array(size)], name));
    }
    const target = document.querySelector(selector);
    for (const type of ["dragenter", "dragover", "drop"]) {
        const init = {bubbles: true, cancelable: true, dataTransfer: transfer};
        target.dispatchEvent(new DragEvent(type, init));
    }
}"""


def test_files_dropped_on_a_folder_are_one_commit_and_an_oversize_one_is_refused(
    berth_server, cast, shop
):
    before, _, _ = head_and_paths(shop)
    with chromium_page() as page:
        sign_in_as(page, berth_server, "carol", "/t/team-a/w/shop/")
        page.wait_for_selector(".tree a.dir-page[data-path='docs']")
        # A file past the cap: refused with its typed error, nothing sent or committed.
        big = [["big.bin", 11 * 1024 * 1024, None]]
        page.evaluate(DROP, [".tree a.dir-page[data-path='docs']", big])
        status = page.locator("[data-upload-status]")
        expect(status).to_contain_text("file_too_large")
        expect(status).to_contain_text("'big.bin' is 11.0 MB")
        assert head_and_paths(shop)[0] == before

        files = [["notes.txt", 0, "hello\n"], ["data.csv", 0, "a,b\n1,2\n"]]
        page.evaluate(DROP, [".tree a.dir-page[data-path='docs']", files])
        page.wait_for_url("**path=docs")
        expect(page.locator(".messages")).to_contain_text("Upload 2 files to docs")
        after, message, _ = head_and_paths(shop)
        assert message == "Upload 2 files to docs"
        with open_store(shop) as store:
            assert store.commit(after).parents == [before.encode()]  # one commit
            for path, text in (("docs/notes.txt", b"hello\n"), ("docs/data.csv", b"a,b\n1,2\n")):
                _, blob = store.lookup(after, path)
                assert store.blob(blob) == text

        # Without a mouse: the Upload button picks files for the folder the page shows.
        with page.expect_file_chooser() as chooser:
            page.get_by_role("button", name="Upload").press("Enter")
        picked = {"name": "picked.txt", "mimeType": "text/plain", "buffer": b"picked\n"}
        chooser.value.set_files(files=[picked])
        expect(page.locator(".messages")).to_contain_text("Upload docs/picked.txt")
        assert head_and_paths(shop)[1] == "Upload docs/picked.txt"
