"""Searching a commit's files through the JSON API and MCP, as an agent does: literal
text or a regex, the case, a path glob; binaries, large files and links never searched;
every bound said in the answer; bad input one typed 422; another team's a 404."""

import time
from urllib.parse import quote

import pytest

from accounts.access import Actor
from tests.support.api import Api, assert_error
from tests.support.mcp import connect
from workspaces import actions
from workspaces.changes import Change

APP = b"""import json


def greeting(name):
    return "Hello, " + name


def main():
    print(greeting("World"))  # Hello again
"""


@pytest.fixture
def shop(cast):
    workspace = actions.create_workspace(cast.team_a, Actor(cast.carol), "Shop", "shop", None)
    actions.commit_changes(
        workspace,
        Actor(cast.carol),
        [
            Change("write", "app.py", APP),
            Change("write", "docs/guide.md", b"# Guide\n\nCall greeting() to say Hello.\n"),
            Change("write", "src/lib/util.py", b"def axb():\n    return 'a.b'\n"),
            Change("write", "logo.png", b"\x89PNG\r\n\x1a\n\0\0greeting\0"),
            Change("write", "big.txt", b"greeting\n" + b"x" * 5000),
            # A link is an entry whose content is its target: never opened, never searched.
            Change("symlink", "link-to-app", b"app.py"),
            Change("symlink", "greeting-link", b"/etc/greeting"),
        ],
        "Add files",
    )
    return workspace


@pytest.fixture
def agent(client, cast):
    _, secret = cast.token(cast.carol, ["workspace:read"])
    return Api(client, secret)


@pytest.fixture(autouse=True)
def small_files(settings):
    settings.SEARCH_MAX_FILE_BYTES = 4096


def lines(body: dict) -> list[tuple[str, int]]:
    return [(m["path"], m["line"]) for m in body["matches"]]


def test_a_literal_search_finds_each_line_once_with_where_it_is(agent, shop):
    r = agent.get("/workspaces/shop/search?q=greeting")
    assert r.status_code == 200, r.content
    body = r.json()
    # Tree order, folders after the files beside them; line 9 has it twice, listed once.
    assert lines(body) == [("app.py", 4), ("app.py", 9), ("docs/guide.md", 3)]
    first = body["matches"][0]
    assert first["column"] == 5 and first["text"] == "def greeting(name):"
    assert first["text"][first["match_start"] : first["match_end"]] == "greeting"
    assert body["ref"] == "main" and len(body["commit"]) == 40
    assert body["truncated"] is False and body["stopped"] is None
    assert body["files_matched"] == 2
    # Binary and past the file bound: skipped and named, never searched.
    assert {(s["path"], s["reason"]) for s in body["skipped"]} == {
        ("logo.png", "binary"),
        ("big.txt", "too_large"),
    }
    assert body["skipped_count"] == 2
    assert body["limits"]["max_file_bytes"] == 4096

    # A literal's metacharacters are text: "a.b" is not "axb".
    dots = agent.get("/workspaces/shop/search?q=a.b").json()
    assert lines(dots) == [("src/lib/util.py", 2)]


def test_case_is_smart_unless_asked_and_a_glob_narrows_the_paths(agent, shop):
    hello = "/workspaces/shop/search?q=hello"
    assert len(agent.get(hello).json()["matches"]) == 3  # lowercase: any case
    assert agent.get(hello + "&case=sensitive").json()["matches"] == []
    assert len(agent.get("/workspaces/shop/search?q=Hello").json()["matches"]) == 3
    assert agent.get("/workspaces/shop/search?q=HELLO").json()["matches"] == []
    assert len(agent.get("/workspaces/shop/search?q=HELLO&case=insensitive").json()["matches"]) == 3

    assert lines(agent.get("/workspaces/shop/search?q=greeting&paths=*.md").json()) == [
        ("docs/guide.md", 3)
    ]
    assert lines(agent.get("/workspaces/shop/search?q=def&paths=src/").json()) == [
        ("src/lib/util.py", 1)
    ]
    both = agent.get("/workspaces/shop/search?q=def&paths=src/**/*.py,docs/*").json()
    assert lines(both) == [("src/lib/util.py", 1)]
    # `*` stays within a folder.
    assert agent.get("/workspaces/shop/search?q=def&paths=src/*.py").json()["matches"] == []


def test_a_regex_matches_by_line_and_a_bad_one_is_a_typed_error(agent, shop):
    pattern = quote(r"^def\s+\w+\(\)")
    body = agent.get(f"/workspaces/shop/search?q={pattern}&regex=true").json()
    assert lines(body) == [("app.py", 8), ("src/lib/util.py", 1)]
    assert body["matches"][0]["text"] == "def main():"
    # As a literal, the same text is found nowhere.
    assert agent.get(f"/workspaces/shop/search?q={pattern}").json()["matches"] == []

    error = assert_error(
        agent.get("/workspaces/shop/search?q=(unclosed&regex=true"), 422, "invalid_regex"
    )
    assert error["details"]["field"] == "q"


def test_bad_input_is_one_422_with_a_stable_code(agent, shop, settings):
    settings.SEARCH_MAX_QUERY_CHARS = 20
    cases = {
        "q=": "empty_query",
        "q=" + "x" * 21: "query_too_long",
        "q=a&limit=0": "below_minimum",
        f"q=a&limit={settings.SEARCH_MAX_MATCHES + 1}": "above_maximum",
        "q=a&paths=/etc/*": "invalid_glob",
        "q=a&case=loud": "invalid",
        "q=a&regex=maybe": "invalid",
        "ref=main": "invalid",  # no q at all
    }
    for query, code in cases.items():
        assert_error(agent.get(f"/workspaces/shop/search?{query}"), 422, code)
    assert_error(agent.get("/workspaces/shop/search?q=a&ref=nope"), 404, "ref_not_found")


def test_every_bound_stops_the_search_and_says_so(agent, shop, cast, settings):
    capped = agent.get("/workspaces/shop/search?q=e&limit=2").json()
    assert len(capped["matches"]) == 2
    assert capped["truncated"] is True and capped["stopped"] == "match_limit"

    settings.SEARCH_MAX_SCAN_BYTES = 10
    scanned = agent.get("/workspaces/shop/search?q=zzz").json()
    assert scanned["stopped"] == "scan_limit" and scanned["files_scanned"] == 1

    # A pattern that backtracks for ever under a backtracking engine simply completes on
    # RE2: matching is linear in the text.
    settings.SEARCH_MAX_SCAN_BYTES = 2**30
    settings.SEARCH_TIME_S = 0.5
    settings.SEARCH_MAX_FILE_BYTES = 1 << 20
    actions.commit_changes(
        shop, Actor(cast.carol), [Change("write", "aaa.txt", b"a" * 40 + b"!\n")], "Add aaa"
    )
    started = time.monotonic()
    done = agent.get(f"/workspaces/shop/search?q={quote('(a|aa)+$')}&regex=true").json()
    assert time.monotonic() - started < 3
    assert done["truncated"] is False and done["matches"] == []

    # A pattern whose program is large costs bytes x instructions when RE2's DFA gives
    # up: it stops at the time bound, the clock read between chunks of lines.
    actions.commit_changes(
        shop,
        Actor(cast.carol),
        [Change("write", "wide.txt", (b"a" * 4000 + b"\n") * 200)],
        "Add wide",
    )
    heavy = "(?:x|.{200})" + ".{200}" * 7 + "b"
    started = time.monotonic()
    slow = agent.get(f"/workspaces/shop/search?q={quote(heavy)}&regex=true").json()
    assert time.monotonic() - started < 5
    assert slow["truncated"] is True and slow["stopped"] == "time_limit"


def test_another_teams_workspace_is_not_found(client, cast, shop):
    _, secret = cast.token(cast.charlie)
    other = Api(client, secret)
    assert_error(other.get("/workspaces/shop/search?q=greeting"), 404, "not_found")


def test_an_agent_searches_through_mcp_with_the_same_answers_and_errors(berth_server, cast, shop):
    _, secret = cast.token(cast.carol, ["workspace:read"])
    _, outsider = cast.token(cast.charlie)

    async def body(agent):
        found = await agent("search_files", workspace="shop", query="greeting", paths="*.py")
        assert [(m["path"], m["line"]) for m in found["matches"]] == [
            ("app.py", 4),
            ("app.py", 9),
        ]
        assert found["ref"] == "main" and found["truncated"] is False
        regex = await agent("search_files", workspace="shop", query=r"return\s'", regex=True)
        assert [m["path"] for m in regex["matches"]] == ["src/lib/util.py"]
        error = await agent.error("search_files", workspace="shop", query="(", regex=True)
        assert error["code"] == "invalid_regex"

    connect(berth_server, secret, body)

    async def stranger(agent):
        error = await agent.error("search_files", workspace="shop", query="greeting")
        assert error["code"] == "not_found"

    connect(berth_server, outsider, stranger)


def test_the_pages_search_panel_and_quick_open_list_read_the_same_commit(signed_in, cast, shop):
    carol = signed_in(cast.carol)
    url = "/t/team-a/w/shop/search/?q=greeting&ref=main"
    partial = carol.get(url, HTTP_HX_REQUEST="true")
    assert partial.status_code == 200 and "Vary" in partial and "HX-Request" in partial["Vary"]
    html = partial.content.decode()
    assert "<html" not in html
    assert 'href="/t/team-a/w/shop/?ref=main&amp;path=app.py&amp;line=9"' in html
    assert "<mark>greeting</mark>" in html and "logo.png" in html  # named as skipped
    page = carol.get(url)
    assert page.status_code == 200 and "<html" in page.content.decode()

    bad = carol.get("/t/team-a/w/shop/search/?q=(&regex=1", HTTP_HX_REQUEST="true")
    assert bad.status_code == 422 and 'data-code="invalid_regex"' in bad.content.decode()
    bomb = quote("(?:(?:a{100}){100}){30}")
    big = carol.get(f"/t/team-a/w/shop/search/?q={bomb}&regex=1", HTTP_HX_REQUEST="true")
    assert big.status_code == 422 and 'data-code="regex_too_large"' in big.content.decode()

    listed = carol.get("/t/team-a/w/shop/files/all/?ref=main").json()
    assert listed["truncated"] is False and len(listed["commit"]) == 40
    assert {"app.py", "docs/guide.md", "src/lib/util.py", "link-to-app"} <= set(listed["paths"])

    charlie = signed_in(cast.charlie)
    assert charlie.get(url).status_code == 404
    assert charlie.get("/t/team-a/w/shop/files/all/").status_code == 404
