"""Workspaces through the pages a person uses: dashboard, editor page, history, settings."""

import re

import pytest
from django.conf import settings

from accounts.access import Actor
from accounts.models import Activity
from core.errors import NotFound
from workspaces import history
from workspaces.changes import Change, TreeEditor
from workspaces.gitstore import MODE_LINK
from workspaces.models import Workspace
from workspaces.store import author_of, open_store

PAGE = "/t/team-a/w/shop/"


def head(slug: str = "shop", branch: str = "main") -> str:
    with open_store(Workspace.objects.get(slug=slug)) as store:
        sha = store.branch_head(branch)
    assert sha
    return sha


def file_at(ref: str, path: str, slug: str = "shop") -> str:
    with open_store(Workspace.objects.get(slug=slug)) as store:
        return history.read_file(store, store.resolve(ref), path)["content"]


def exists(ref: str, path: str) -> bool:
    with open_store(Workspace.objects.get(slug="shop")) as store:
        try:
            store.lookup(store.resolve(ref), path)
        except NotFound:
            return False
    return True


def base_commit_of(html: str) -> str:
    match = re.search(r'data-base-commit="([0-9a-f]{40})"', html)
    assert match, "no editor on the page"
    return match.group(1)


def save(client, path: str, content: str, base: str, branch: str = "main", message: str = ""):
    return client.post(
        f"{PAGE}save/",
        {
            "path": path,
            "content": content,
            "branch": branch,
            "base_commit": base,
            "message": message,
        },
        content_type="application/json",
    )


@pytest.fixture
def alice(signed_in, cast):
    return signed_in(cast.alice)


@pytest.fixture
def carol(signed_in, cast):
    return signed_in(cast.carol)


@pytest.fixture
def shop(alice):
    r = alice.post("/t/team-a/", {"name": "Shop", "slug": "", "template": "python-http"})
    assert r.status_code == 302 and r["Location"] == PAGE
    return Workspace.objects.get(slug="shop")


def test_the_dashboard_lists_workspaces_and_creates_one_from_a_template(alice, shop):
    page = alice.get("/t/team-a/").content.decode()
    assert "Shop" in page and "python-http" in page
    assert "Create workspace from the python-http template" in page
    assert "Static HTML and CSS site" in page  # each starter is offered with its description
    r = alice.post("/t/team-a/", {"name": "Blank notes", "slug": "notes", "template": ""})
    assert r.status_code == 302 and r["Location"] == "/t/team-a/w/notes/"
    assert Workspace.objects.get(slug="notes").template == ""
    assert alice.get("/").url == "/t/team-a/"


@pytest.mark.parametrize(
    "form, message",
    [
        ({"name": "Shop again", "slug": "shop"}, "already has a workspace"),
        ({"name": "Bad", "slug": "Bad Slug!"}, "is not valid"),
        ({"name": "Reserved", "slug": "xn"}, "is reserved"),
        ({"name": "", "slug": "x"}, "This field is required"),
    ],
)
def test_a_bad_new_workspace_re_renders_the_form_with_the_reason(alice, shop, form, message):
    r = alice.post("/t/team-a/", {"template": "", **form})
    assert r.status_code == 422
    assert message in r.content.decode()
    assert Workspace.objects.count() == 1


def test_the_workspace_page_shows_the_tree_and_the_open_file(alice, shop):
    r = alice.get(f"{PAGE}?path=app.py")
    page = r.content.decode()
    assert r.status_code == 200
    for name in ["app.py", "test_app.py", "workspace.toml", "README.md"]:
        assert f'path={name}"' in page
    assert "def greeting(name: str)" in page  # the file's text, for the editor
    assert base_commit_of(page) == head()
    assert 'data-branch="main"' in page and "vendor/editor.js" in page
    assert f"{settings.APP_URL}/git/team-a/shop.git" in page and "API token" in page


def test_folders_open_in_place_with_htmx_and_deep_links_show_the_way(alice, shop):
    r = save(alice, "src/lib/util.py", "X = 1\n", head())
    assert r.status_code == 200
    r = alice.get(f"{PAGE}tree/?ref=main&path=src", HTTP_HX_REQUEST="true")
    assert r.status_code == 200 and "HX-Request" in r["Vary"]
    fragment = r.content.decode()
    assert "<html" not in fragment and "path=src/lib" in fragment
    assert "tree/?ref=main&amp;path=src/lib" in fragment  # the next level loads lazily
    r = alice.get(f"{PAGE}tree/?ref=main&path=src")
    assert r.status_code == 302 and r["Location"] == f"{PAGE}?ref=main&path=src"
    page = alice.get(f"{PAGE}?path=src/lib/util.py").content.decode()
    assert 'path=src/lib/util.py" aria-current' in page and "X = 1" in page


def test_saving_makes_one_commit_by_the_person(carol, shop):
    base = base_commit_of(carol.get(f"{PAGE}?path=app.py").content.decode())
    text = file_at("main", "app.py").replace("Hello", "Ahoy")
    r = save(carol, "app.py", text, base, message="Say ahoy")
    assert r.status_code == 200, r.content
    sha = r.json()["commit"]
    assert head() == sha and r.json()["warnings"] == []
    assert file_at("main", "app.py") == text
    with open_store(shop) as store:
        commit = history.commit_summary(store, sha)
    assert commit["title"] == "Say ahoy" and commit["author"]["name"] == "carol"
    assert commit["parents"] == [base]
    assert Activity.objects.filter(verb="workspace.committed", user__username="carol").exists()


def test_a_stale_base_commit_is_409_and_changes_nothing(alice, carol, shop):
    base = head()
    assert save(alice, "app.py", "# alice was here\n", base).status_code == 200
    moved = head()
    r = save(carol, "app.py", "# carol's edit\n", base)
    assert r.status_code == 409
    assert r.json()["error"]["code"] == "conflict" and "reload" in r.json()["error"]["message"]
    assert head() == moved and file_at("main", "app.py") == "# alice was here\n"


def test_a_save_returns_workspace_toml_warnings(alice, shop):
    r = save(alice, "workspace.toml", "[preview]\nport = 99999\n", head())
    assert r.status_code == 200
    assert "port" in r.json()["warnings"][0]["message"]
    page = alice.get(f"{PAGE}?path=workspace.toml").content.decode()
    assert "line 2" in page  # the page shows the problem while the file is open


@pytest.mark.parametrize(
    "body",
    [
        {"path": "app.py", "content": "x", "branch": "main", "base_commit": "main"},
        {"path": "../etc/passwd", "content": "x", "branch": "main", "base_commit": "0" * 40},
        {"path": "app.py", "content": 5, "branch": "main", "base_commit": "0" * 40},
        "[" * 100_000 + "]" * 100_000,
    ],
)
def test_a_malformed_save_is_422_and_changes_nothing(alice, shop, body):
    before = head()
    r = alice.post(f"{PAGE}save/", body, content_type="application/json")
    assert r.status_code == 422 and r.json()["error"]["message"]
    assert head() == before


def test_new_rename_and_delete_are_one_commit_each(carol, shop):
    first = head()
    r = carol.post(
        f"{PAGE}files/new/",
        {"path": "docs/notes.md", "branch": "main", "base_commit": first},
        HTTP_HX_REQUEST="true",
    )
    assert r.status_code == 200 and r["HX-Redirect"] == f"{PAGE}?ref=main&path=docs%2Fnotes.md"
    created = head()
    assert file_at("main", "docs/notes.md") == ""
    r = carol.post(
        f"{PAGE}files/rename/",
        {"path": "docs/notes.md", "to": "NOTES.md", "branch": "main", "base_commit": created},
    )
    assert r.status_code == 302 and r["Location"] == f"{PAGE}?ref=main&path=NOTES.md"
    renamed = head()
    assert exists("main", "NOTES.md") and not exists("main", "docs/notes.md")
    r = carol.post(
        f"{PAGE}files/delete/",
        {"path": "NOTES.md", "branch": "main", "base_commit": renamed},
        follow=True,
    )
    assert "Delete NOTES.md: commit" in r.content.decode()
    assert not exists("main", "NOTES.md")
    with open_store(shop) as store:
        log = history.history(store, head(), "", 1, 10)["commits"]
    assert [c["title"] for c in log[:3]] == [
        "Delete NOTES.md",
        "Rename docs/notes.md to NOTES.md",
        "Create docs/notes.md",
    ]
    assert log[3]["sha"] == first


def test_file_actions_explain_what_went_wrong_in_the_dialog(carol, shop):
    base = head()
    r = carol.post(
        f"{PAGE}files/new/",
        {"path": "app.py", "branch": "main", "base_commit": base},
        HTTP_HX_REQUEST="true",
    )
    assert r.status_code == 409 and "already exists" in r.content.decode()
    assert "<html" not in r.content.decode()
    r = carol.post(
        f"{PAGE}files/rename/",
        {"path": "app.py", "to": "README.md", "branch": "main", "base_commit": base},
        HTTP_HX_REQUEST="true",
    )
    assert r.status_code == 409 and "it exists" in r.content.decode()
    r = carol.post(
        f"{PAGE}files/delete/",
        {"path": "app.py", "branch": "main", "base_commit": "a" * 40},
        HTTP_HX_REQUEST="true",
    )
    assert r.status_code == 409 and "has moved" in r.content.decode()
    r = carol.post(
        f"{PAGE}files/new/", {"path": "a/../b", "branch": "main", "base_commit": base}, follow=True
    )
    assert "component" in r.content.decode()  # a plain form post shows it on the page
    assert head() == base


def test_a_new_branch_starts_at_the_page_and_saves_go_to_it(alice, shop):
    base = head()
    r = alice.post(
        f"{PAGE}branches/new/",
        {"name": "ahoy", "from_ref": base, "path": "app.py"},
        HTTP_HX_REQUEST="true",
    )
    assert r["HX-Redirect"] == f"{PAGE}?ref=ahoy&path=app.py"
    page = alice.get(f"{PAGE}?ref=ahoy&path=app.py").content.decode()
    assert 'data-branch="ahoy"' in page and '<option value="ahoy" selected>' in page
    assert save(alice, "app.py", "# on a branch\n", base, branch="ahoy").status_code == 200
    assert file_at("ahoy", "app.py") == "# on a branch\n" and head() == base
    r = alice.post(
        f"{PAGE}branches/new/", {"name": "bad..name", "from_ref": base}, HTTP_HX_REQUEST="true"
    )
    assert r.status_code == 422 and "not a valid branch name" in r.content.decode()


def test_a_commit_is_shown_read_only(alice, shop):
    sha = head()
    page = alice.get(f"{PAGE}?ref={sha}&path=app.py").content.decode()
    assert "data-readonly" in page and "read-only" in page and 'id="savebar"' not in page


def test_binary_files_and_symlinks_show_a_note_and_links_are_not_followed(alice, cast, shop):
    with open_store(shop) as store:
        parent = store.branch_head("main")
        editor = TreeEditor(store, store.commit(parent).tree)
        editor.apply(Change("write", "logo.png", b"\x89PNG\r\n\x1a\n\x00\x00"))
        editor._put("passwd", (MODE_LINK, store.add_blob(b"/etc/passwd")))
        sha = store.make_commit(editor.write(), [parent], author_of(Actor(cast.alice)), "assets")
        store.advance("main", parent, sha)
    page = alice.get(f"{PAGE}?path=logo.png").content.decode()
    assert "Binary file" in page and "10\xa0bytes" in page and 'id="editor"' not in page
    page = alice.get(f"{PAGE}?path=passwd").content.decode()
    assert "Symbolic link" in page and "/etc/passwd" in page and "root:" not in page
    commit = alice.get(f"{PAGE}commits/{sha}/").content.decode()
    assert "Binary file; not shown" in commit


def test_a_missing_file_or_ref_says_so(alice, shop):
    r = alice.get(f"{PAGE}?path=nope.py")
    assert r.status_code == 404 and "No file &#x27;nope.py&#x27;" in r.content.decode()
    r = alice.get(f"{PAGE}?ref=nope")
    assert r.status_code == 404 and "No branch, tag or commit" in r.content.decode()
    assert alice.get(f"{PAGE}?path=../etc").status_code == 422


def test_history_and_commit_pages_show_the_diff(alice, shop):
    text = file_at("main", "app.py").replace("Hello", "Ahoy")
    r = save(alice, "app.py", text, head(), message="Say ahoy\n\nSailors like it.")
    sha = r.json()["commit"]
    page = alice.get(f"{PAGE}history/").content.decode()
    assert "Say ahoy" in page and "Create workspace from the python-http template" in page
    assert f"commits/{sha}/" in page
    page = alice.get(f"{PAGE}history/?path=README.md").content.decode()
    assert "Say ahoy" not in page and "Create workspace" in page
    commit = alice.get(f"{PAGE}commits/{sha}/").content.decode()
    assert "Sailors like it." in commit and "1 file changed" in commit
    assert re.search(r'<tr class="del">.*Hello, \{name', commit)
    assert re.search(r'<tr class="add">.*Ahoy, \{name', commit)
    assert alice.get(f"{PAGE}commits/{'f' * 40}/").status_code == 404


def test_history_is_paged(alice, shop):
    base = head()
    for i in range(31):
        base = save(alice, "count.txt", f"{i}\n", base, message=f"Count {i}").json()["commit"]
    first = alice.get(f"{PAGE}history/").content.decode()
    assert "Count 30" in first and "Older" in first and "Create workspace" not in first
    second = alice.get(f"{PAGE}history/?page=2").content.decode()
    assert "Create workspace" in second and "Newer" in second and "Older" not in second


def test_charlie_gets_404_for_every_page_and_post_of_team_a(signed_in, cast, shop):
    charlie = signed_in(cast.charlie)
    sha = head()
    for path in ["", "?path=app.py", "tree/?path=", "history/", f"commits/{sha}/", "settings/"]:
        assert charlie.get(PAGE + path).status_code == 404, path
        assert charlie.get(PAGE + path, HTTP_HX_REQUEST="true").status_code == 404, path
    posts = {
        "save/": None,
        "files/new/": {"path": "x", "branch": "main", "base_commit": sha},
        "files/delete/": {"path": "app.py", "branch": "main", "base_commit": sha},
        "files/rename/": {"path": "app.py", "to": "y", "branch": "main", "base_commit": sha},
        "branches/new/": {"name": "b", "from_ref": "main"},
        "settings/delete/": {"confirm": "shop"},
    }
    for path, data in posts.items():
        if data is None:
            r = charlie.post(
                PAGE + path,
                {"path": "app.py", "content": "x", "branch": "main", "base_commit": sha},
                content_type="application/json",
            )
        else:
            r = charlie.post(PAGE + path, data)
        assert r.status_code == 404, path
    assert head() == sha and Workspace.objects.filter(slug="shop").exists()


def test_only_an_admin_deletes_and_only_with_the_slug_typed(alice, signed_in, cast, shop):
    for user in (cast.bob, cast.carol):
        client = signed_in(user)
        assert "Only an admin" in client.get(f"{PAGE}settings/").content.decode()
        r = client.post(f"{PAGE}settings/delete/", {"confirm": "shop"})
        assert r.status_code == 403 and "Only an admin" in r.content.decode()
    r = alice.post(f"{PAGE}settings/delete/", {"confirm": "Shop"})
    assert r.status_code == 422 and "Type shop exactly" in r.content.decode()
    repo = shop.repo_path
    assert Workspace.objects.filter(slug="shop").exists() and repo.exists()
    r = alice.post(f"{PAGE}settings/delete/", {"confirm": "shop"}, follow=True)
    assert r.redirect_chain[-1][0] == "/t/team-a/"
    assert "Deleted workspace shop" in r.content.decode()
    assert not Workspace.objects.filter(slug="shop").exists()
    assert alice.get(PAGE).status_code == 404


def test_page_changes_need_the_csrf_token(cast, shop):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(cast.alice)
    base = head()
    r = client.post(
        f"{PAGE}save/",
        {"path": "app.py", "content": "x", "branch": "main", "base_commit": base},
        content_type="application/json",
    )
    assert r.status_code == 403
    token = re.search(r'"X-CSRFToken": "([^"]+)"', client.get(PAGE).content.decode())
    assert token
    r = client.post(
        f"{PAGE}save/",
        {"path": "app.py", "content": "x", "branch": "main", "base_commit": base},
        content_type="application/json",
        HTTP_X_CSRFTOKEN=token.group(1),
    )
    assert r.status_code == 200 and head() != base


def test_a_readme_past_the_bound_is_named_not_rendered(alice, shop, settings):
    settings.WORKSPACE_README_MAX_BYTES = 1024
    from workspaces import actions

    long = b"# Big\n\n" + b"word " * 400
    actions.commit_changes(
        shop, Actor(shop.created_by), [Change("write", "README.md", long)], "Big"
    )
    page = alice.get(PAGE).content.decode()
    assert "more than the 1.0\xa0KB shown here" in page
    assert "<h1>Big</h1>" not in page
    actions.commit_changes(
        shop, Actor(shop.created_by), [Change("write", "README.md", b"# Small\n")], "Small"
    )
    assert "<h1>Small</h1>" in alice.get(PAGE).content.decode()
