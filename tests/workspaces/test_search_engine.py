"""Search's engine is RE2: a short pattern cannot take the host's memory (the `regex`
package expanded counted repeats when it compiled: 23 characters took 88 MB, 42 took
23 GB), matching is linear, byte offsets become character columns, a long line is cut
and says so. Through the real doors: daphne's API and MCP, whose peak memory is read."""

import json
import urllib.error
import urllib.request
from urllib.parse import quote

import pytest

from accounts.access import Actor
from tests.support.api import Api, assert_error
from tests.support.mcp import connect
from tests.support.memory import PEAK_RSS_BOUND_MB, peak_rss_mb
from workspaces import actions
from workspaces.changes import Change

# Nested counted repeats, 23 to 42 characters: each would expand to 300,000 to 10**10
# copies under an engine that unrolls them when it compiles.
BOMBS = [
    "(?:(?:a{100}){100}){30}",
    "(?:(?:(?:a{100}){100}){100}){30}",
    "(?:(?:(?:(?:a{99}){99}){99}){99}){9}",
    "((((((a{9}){9}){9}){9}){9}){9}){9}",
    "(?:(?:(?:(?:(?:a{100}){99}){99}){99}){99})",
    "(?:[\\w\\s]{1000}){1000}",
    "(?:\\pL{999})",
    "(?:.{999}){2}(?:.{999}){2}",
]


@pytest.fixture
def shop(cast):
    workspace = actions.create_workspace(cast.team_a, Actor(cast.carol), "Shop", "shop", None)
    actions.commit_changes(
        workspace,
        Actor(cast.carol),
        [
            Change("write", "app.py", b"def greeting():\n    return 'aaaa'\n"),
            # Two-byte and three-byte characters before the match, and a Latin-1 byte.
            Change(
                "write", "notes.txt", "naïve café → greeting\n".encode() + b"caf\xe9 greeting\n"
            ),
            Change("write", "echo.txt", b"abab\nabba\n"),
        ],
        "Add files",
    )
    return workspace


def http_get(url: str, secret: str) -> tuple[int, dict]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {secret}"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_nested_counted_repeats_are_refused_and_daphne_stays_small(berth_server, cast, shop):
    _, secret = cast.token(cast.carol, ["workspace:read"])
    assert max(len(b) for b in BOMBS) == 42
    for bomb in BOMBS:
        url = f"{berth_server.url}/api/v1/workspaces/shop/search?q={quote(bomb)}&regex=true"
        status, body = http_get(url, secret)
        assert status == 422, (bomb, body)
        assert body["error"]["code"] == "regex_too_large", (bomb, body)
        assert "1,000" in body["error"]["message"]
        assert body["error"]["details"]["field"] == "q"

    async def agent_sends_them(agent):
        for bomb in BOMBS:
            error = await agent.error("search_files", workspace="shop", query=bomb, regex=True)
            assert error["code"] == "regex_too_large", (bomb, error)
        # daphne still answers, and a sound regex still finds its line.
        found = await agent("search_files", workspace="shop", query=r"return\s'a+'", regex=True)
        assert [(m["path"], m["line"]) for m in found["matches"]] == [("app.py", 2)]

    connect(berth_server, secret, agent_sends_them)
    # What RE2 has not is a pattern that is wrong, not too large.
    status, body = http_get(
        f"{berth_server.url}/api/v1/workspaces/shop/search?q={quote(r'(ab)\1')}&regex=true", secret
    )
    assert status == 422 and body["error"]["code"] == "invalid_regex"
    assert peak_rss_mb(berth_server.pid) < PEAK_RSS_BOUND_MB


@pytest.fixture
def agent(client, cast):
    _, secret = cast.token(cast.carol, ["workspace:read"])
    return Api(client, secret)


def test_columns_count_characters_not_bytes(agent, shop):
    body = agent.get("/workspaces/shop/search?q=greeting&paths=notes.txt").json()
    first, latin = body["matches"]
    # "naïve café → " is 13 characters and 17 bytes.
    assert (first["line"], first["column"]) == (1, 14)
    assert first["text"][first["match_start"] : first["match_end"]] == "greeting"
    # The Latin-1 byte is one replaced character, as the whole file decoded would have it.
    assert (latin["line"], latin["column"], latin["text"]) == (2, 6, "caf\ufffd greeting")
    assert latin["text"][latin["match_start"] : latin["match_end"]] == "greeting"
    # Case folds beyond ASCII, and a match's end is counted in characters too.
    café = agent.get(f"/workspaces/shop/search?q={quote('CAFÉ →')}&case=insensitive").json()
    m = café["matches"][0]
    assert (m["column"], m["text"][m["match_start"] : m["match_end"]]) == (7, "café →")


def test_a_line_past_the_cap_is_searched_up_to_it_and_counted(
    agent, cast, shop, settings, signed_in
):
    settings.SEARCH_MAX_LINE_BYTES = 100
    lines = [
        b"x" * 50 + b"needle" + b"x" * 100,  # found: it starts inside the cap
        b"y" * 150 + b"needle",  # past the cap: not found
        b"x" + "é".encode() * 50 + b"needle",  # the cap falls inside an é: cut before it
        b"needle at the end",
    ]
    actions.commit_changes(
        shop, Actor(cast.carol), [Change("write", "long.txt", b"\n".join(lines))], "Add long"
    )
    body = agent.get("/workspaces/shop/search?q=needle&paths=long.txt").json()
    assert [(m["line"], m["column"]) for m in body["matches"]] == [(1, 51), (4, 1)]
    assert body["lines_cut"] == 3 and body["limits"]["max_line_bytes"] == 100
    # The page's panel says so too.
    panel = signed_in(cast.carol).get(
        "/t/team-a/w/shop/search/?q=needle&paths=long.txt", HTTP_HX_REQUEST="true"
    )
    assert "3 long lines searched in 100\xa0bytes only" in panel.content.decode()
    # A line's end at the cut is its end, for $ too: line 3 now ends in its 49th é.
    ends = agent.get(f"/workspaces/shop/search?q={quote('é$')}&regex=true").json()
    assert lines_of(ends) == [("long.txt", 3)]
    assert ends["matches"][0]["text"] == "x" + "é" * 49


def test_what_re2_has_not_is_invalid_and_says_so(agent, shop):
    for pattern in [r"(ab)\1", r"a(?=b)", r"(?<!a)b", r"a(?!b)"]:
        r = agent.get(f"/workspaces/shop/search?q={quote(pattern)}&regex=true")
        error = assert_error(r, 422, "invalid_regex")
        assert "no backreferences" in error["message"] and "lookaround" in error["message"]
    # RE2's syntax otherwise, \w ASCII only: "ï" is no word character.
    word = quote(r"\bna\w*")
    words = agent.get(f"/workspaces/shop/search?q={word}&regex=true&paths=notes.txt").json()
    assert [m["text"][m["match_start"] : m["match_end"]] for m in words["matches"]] == ["na"]
    # A match never crosses a line: "abab\nabba" has no "b\sa", one line has "ab".
    across = agent.get(f"/workspaces/shop/search?q={quote(r'b\sa')}&regex=true").json()
    assert across["matches"] == []
    assert lines_of(agent.get("/workspaces/shop/search?q=b%24&regex=true").json()) == [
        ("echo.txt", 1)
    ]
    # A glob of many stars matches in linear time, as a pattern does.
    stars = quote("*a" * 40 + "*.py,*.py")
    assert lines_of(agent.get(f"/workspaces/shop/search?q=def&paths={stars}").json()) == [
        ("app.py", 1)
    ]


def lines_of(body: dict) -> list[tuple[str, int]]:
    return [(m["path"], m["line"]) for m in body["matches"]]
