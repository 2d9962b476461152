"""Two guards on how code runs: an admin may require gVisor for a workspace or a whole
team (and no workspace.toml or request can lower it), and a commit that changes the
execution contract in workspace.toml says so loudly on its page and in the API."""

import html
import platform

import pytest
from django.conf import settings

from accounts.models import Activity, Team
from tests.support.api import bearer
from tests.support.runs import Agent
from workspaces import contract
from workspaces.models import Workspace

PAGE = "/t/team-a/w/shop/"
# Written by the fixture, so the tests do not hang on what the starter's file says.
BASE_TOML = """# How Berth runs this workspace.
[sandbox]
runtime = "runc"      # or "gvisor"
memory_mb = 512
timeout_s = 300

[preview]
command = "python3 app.py"
"""


@pytest.fixture
def alice(signed_in, cast):
    return signed_in(cast.alice)


@pytest.fixture
def shop(alice):
    r = alice.post("/t/team-a/", {"name": "Shop", "slug": "shop", "template": "python-http"})
    assert r.status_code == 302
    return Workspace.objects.get(slug="shop")


@pytest.fixture
def carol_api(client, cast, shop):
    """carol's agent: reads, writes and runs through the JSON API."""
    _, secret = cast.token(cast.carol, ["workspace:read", "workspace:write", "run"])
    agent = Agent(client, secret)
    write(agent, "workspace.toml", BASE_TOML)
    return agent


def write(agent: Agent, path: str, text: str) -> str:
    r = agent.client.put(
        f"/api/v1/workspaces/shop/files/{path}",
        {"content": text, "message": f"Edit {path}"},
        content_type="application/json",
        **agent.headers,
    )
    assert r.status_code == 200, r.content
    return r.json()["commit"]


def policy_rows(verb: str) -> list[Activity]:
    return list(Activity.objects.filter(verb=verb, detail__has_key="require_gvisor"))


# -- the gVisor policy, through the settings and members pages -------------------------


def test_alice_requires_gvisor_for_a_workspace_on_its_settings_page(alice, cast, shop):
    page = alice.get(f"{PAGE}settings/").content.decode()
    assert "Require gVisor for every run of this workspace" in page
    assert "also applies and cannot be lowered here" in page
    r = alice.post(f"{PAGE}settings/gvisor-policy/", {"require_gvisor": "on"}, follow=True)
    assert r.redirect_chain[-1][0] == f"{PAGE}settings/"
    assert "Every run of this workspace now uses gVisor." in r.content.decode()
    shop.refresh_from_db()
    assert shop.require_gvisor is True and shop.requires_gvisor
    [row] = policy_rows("workspace.policy_changed")
    assert (row.user, row.workspace, row.target) == (cast.alice, "shop", "workspace:shop")
    assert row.detail == {"require_gvisor": True}

    alice.post(f"{PAGE}settings/gvisor-policy/", {})  # an unticked box turns it off
    shop.refresh_from_db()
    assert shop.require_gvisor is False
    assert [r.detail for r in policy_rows("workspace.policy_changed")] == [
        {"require_gvisor": False},
        {"require_gvisor": True},
    ]


def test_only_an_admin_changes_the_workspace_gvisor_policy(signed_in, cast, shop):
    for user in (cast.bob, cast.carol):
        client = signed_in(user)
        page = client.get(f"{PAGE}settings/").content.decode()
        assert 'name="require_gvisor" disabled' in page and "Save runtime policy" not in page
        r = client.post(f"{PAGE}settings/gvisor-policy/", {"require_gvisor": "on"})
        assert r.status_code == 403 and "Only an admin" in r.content.decode()
    r = signed_in(cast.charlie).post(f"{PAGE}settings/gvisor-policy/", {"require_gvisor": "on"})
    assert r.status_code == 404
    shop.refresh_from_db()
    assert shop.require_gvisor is False
    assert policy_rows("workspace.policy_changed") == []


def test_alice_requires_gvisor_for_the_whole_team_on_the_members_page(alice, signed_in, cast, shop):
    page = alice.get("/t/team-a/members/").content.decode()
    assert "Team policies" in page and "Require gVisor for every run of every workspace" in page
    r = alice.post("/t/team-a/policies/gvisor/", {"require_gvisor": "on"}, follow=True)
    assert r.redirect_chain[-1][0] == "/t/team-a/members/"
    assert "now uses gVisor" in r.content.decode()
    assert Team.objects.get(slug="team-a").require_gvisor is True
    assert Workspace.objects.get(slug="shop").requires_gvisor
    assert Team.objects.get(slug="team-b").require_gvisor is False
    [row] = policy_rows("team.policy_changed")
    assert (row.team, row.user, row.target) == (cast.team_a, cast.alice, "team:team-a")
    assert row.detail == {"require_gvisor": True}

    # The workspace settings page says the team's requirement applies, and its own box
    # cannot lower it.
    page = alice.get(f"{PAGE}settings/").content.decode()
    assert "requires gVisor for all its workspaces" in page
    alice.post(f"{PAGE}settings/gvisor-policy/", {})
    assert Workspace.objects.get(slug="shop").requires_gvisor


def test_only_an_admin_changes_the_team_gvisor_policy(signed_in, cast):
    for user in (cast.bob, cast.carol):
        client = signed_in(user)
        page = client.get("/t/team-a/members/").content.decode()
        assert 'name="require_gvisor" disabled' in page and "Save team policy" not in page
        assert (
            client.post("/t/team-a/policies/gvisor/", {"require_gvisor": "on"}).status_code == 403
        )
    assert (
        signed_in(cast.charlie)
        .post("/t/team-a/policies/gvisor/", {"require_gvisor": "on"})
        .status_code
        == 404
    )
    assert Team.objects.get(slug="team-a").require_gvisor is False
    assert policy_rows("team.policy_changed") == []


# -- the policy holds for real runs ----------------------------------------------------


def assert_ran_under_gvisor(agent: Agent, done: dict, why: str) -> None:
    assert done["state"] == "succeeded", agent.output(done)
    assert done["isolation"]["runtime"] == "runsc"
    assert any(why in w and "so gvisor applies" in w for w in done["warnings"]), done["warnings"]
    out = agent.output(done)
    assert out[0] != platform.release()  # not the host's kernel
    assert any("gvisor" in line for line in out[1:]), out


# gVisor's own boot line; dmesg is no proof any more: the seccomp profile denies syslog.
PROBE = "uname -r; cat /proc/cmdline"


@pytest.mark.docker
def test_a_workspace_that_requires_gvisor_runs_runc_requests_under_gvisor(
    alice, carol_api, run_stack
):
    alice.post(f"{PAGE}settings/gvisor-policy/", {"require_gvisor": "on"})
    asked = carol_api.wait(carol_api.run(PROBE, runtime="runc"))
    assert_ran_under_gvisor(carol_api, asked, "this workspace requires gVisor")
    # workspace.toml says runtime = "runc": the policy wins there too.
    from_toml = carol_api.wait(carol_api.run(PROBE))
    assert_ran_under_gvisor(carol_api, from_toml, "this workspace requires gVisor")


@pytest.mark.docker
def test_a_team_that_requires_gvisor_runs_every_workspace_under_gvisor(alice, carol_api, run_stack):
    alice.post("/t/team-a/policies/gvisor/", {"require_gvisor": "on"})
    asked = carol_api.wait(carol_api.run(PROBE, runtime="runc"))
    assert_ran_under_gvisor(carol_api, asked, "team team-a requires gVisor")
    from_toml = carol_api.wait(carol_api.run(PROBE))
    assert_ran_under_gvisor(carol_api, from_toml, "team team-a requires gVisor")


@pytest.mark.docker
def test_without_a_policy_runc_is_runc(carol_api, run_stack):
    done = carol_api.wait(carol_api.run("uname -r", runtime="runc"))
    assert done["state"] == "succeeded" and done["isolation"]["runtime"] == "runc"
    assert done["warnings"] == [] and carol_api.output(done) == [platform.release()]


# -- "Execution contract changed" on the commit page and in the API --------------------


def notice_of(alice, sha: str) -> list[str] | None:
    """The lines of the commit page's notice, or None when it shows none."""
    page = html.unescape(alice.get(f"{PAGE}commits/{sha}/").content.decode())
    if "Execution contract changed" not in page:
        return None
    section = page.split("Execution contract changed", 1)[1].split("</section>", 1)[0]
    return [item.split("<code>", 1)[1].split("</code>", 1)[0] for item in section.split("<li")[1:]]


def api_changes(agent: Agent, sha: str) -> list[dict]:
    r = agent.get(f"/workspaces/shop/commits/{sha}")
    assert r.status_code == 200
    return r.json()["contract_changes"]


@pytest.mark.parametrize(
    "old, new, line, change",
    [
        (
            'runtime = "runc"',
            'runtime = "gvisor"',
            '[sandbox] runtime: "runc" → "gvisor"',
            {"section": "sandbox", "key": "runtime", "old": "runc", "new": "gvisor"},
        ),
        (
            "memory_mb = 512",
            "memory_mb = 4096",
            "[sandbox] memory_mb: 512 → 4096",
            {"section": "sandbox", "key": "memory_mb", "old": 512, "new": 4096},
        ),
        (
            "timeout_s = 300\n",
            'timeout_s = 300\n\n[network]\negress = ["pypi.org", "*.pythonhosted.org"]\n',
            '[network] egress: [] (default) → ["pypi.org", "*.pythonhosted.org"]',
            {
                "section": "network",
                "key": "egress",
                "old": [],
                "new": ["pypi.org", "*.pythonhosted.org"],
            },
        ),
    ],
)
def test_a_commit_changing_the_contract_shows_the_notice(alice, carol_api, old, new, line, change):
    toml = carol_api.get("/workspaces/shop/files/workspace.toml").json()["content"]
    assert old in toml
    sha = write(carol_api, "workspace.toml", toml.replace(old, new))
    assert notice_of(alice, sha) == [line]
    assert api_changes(carol_api, sha) == [{"kind": "changed", "message": line, **change}]


def test_a_commit_that_only_edits_python_shows_no_notice(alice, carol_api):
    sha = write(carol_api, "app.py", "print('hello')\n")
    assert notice_of(alice, sha) is None
    assert api_changes(carol_api, sha) == []
    # Rewriting workspace.toml without changing a value is no contract change either.
    sha = write(
        carol_api,
        "workspace.toml",
        "[sandbox]\nmemory_mb = 512\ntimeout_s = 300\n"
        '[preview]\ncommand = "python3 -m http.server"\n',
    )
    assert notice_of(alice, sha) is None and api_changes(carol_api, sha) == []


def test_a_commit_making_workspace_toml_invalid_says_so(alice, carol_api):
    broken = write(carol_api, "workspace.toml", '[sandbox]\nruntime = "kvm"\n')
    [line] = notice_of(alice, broken) or []
    assert line.startswith("workspace.toml became invalid")
    assert "line 2" in line and "runtime" in line
    [change] = api_changes(carol_api, broken)
    assert change["kind"] == "became_invalid" and change["message"] == line

    fixed = write(carol_api, "workspace.toml", '[sandbox]\nruntime = "gvisor"\n')
    lines = notice_of(alice, fixed) or []
    assert lines[0] == "workspace.toml was invalid and is valid again."
    assert '[sandbox] runtime: (invalid) → "gvisor"' in lines
    assert "[sandbox] memory_mb: (invalid) → 1024 (default)" in lines


def test_deleting_and_re_adding_workspace_toml_compares_with_the_defaults(alice, carol_api):
    r = carol_api.client.delete("/api/v1/workspaces/shop/files/workspace.toml", **carol_api.headers)
    assert r.status_code == 200, r.content
    assert notice_of(alice, r.json()["commit"]) == [
        "[sandbox] memory_mb: 512 → 1024 (default)",
        "[sandbox] timeout_s: 300 → 600 (default)",
    ]
    added = write(carol_api, "workspace.toml", '[sandbox]\nruntime = "runc"\ndisk_mb = 512\n')
    assert notice_of(alice, added) == ["[sandbox] disk_mb: 2048 (default) → 512"]


def test_charlie_cannot_read_the_contract_changes_of_team_a(client, cast, shop):
    _, secret = cast.token(cast.charlie)
    assert client.get("/api/v1/workspaces/shop/commits/main", **bearer(secret)).status_code == 404


# -- workspaces.contract on its own ----------------------------------------------------


def messages(before: str | None, after: str | None) -> list[str]:
    return [c.message for c in contract.changes(before, after)]


def test_contract_absent_and_empty_files_are_the_defaults():
    assert contract.changes(None, None) == []
    assert contract.changes(None, "") == []
    default = f'[sandbox]\nimage = "{settings.SANDBOX_IMAGE}"\n'
    assert contract.changes(None, default) == []
    assert contract.changes("# a comment\n", "[setup]\ncommand = 'make'\n") == []


def test_contract_lists_every_sandbox_and_network_key_that_changed():
    before = '[sandbox]\ncpus = 1.0\ndisk_mb = 2048\n[network]\negress = ["a.example"]\n'
    after = (
        '[sandbox]\nimage = "other:1"\ncpus = 2\ndisk_mb = 2048\ntimeout_s = 60\n'
        '[network]\negress = ["a.example", "b.example:443"]\n'
    )
    assert messages(before, after) == [
        f'[sandbox] image: "{settings.SANDBOX_IMAGE}" (default) → "other:1"',
        "[sandbox] cpus: 1.0 → 2",
        "[sandbox] timeout_s: 600 (default) → 60",
        '[network] egress: ["a.example"] → ["a.example", "b.example:443"]',
    ]
    [cpus] = [c for c in contract.changes(before, after) if c.key == "cpus"]
    assert (cpus.kind, cpus.section, cpus.old, cpus.new) == ("changed", "sandbox", 1.0, 2)


def test_contract_ignores_other_sections():
    assert contract.changes("[preview]\nport = 8000\n", "[preview]\nport = 9000\n") == []


@pytest.mark.parametrize(
    "before, after, kind, start",
    [
        (None, "[sandbox\n", "became_invalid", "workspace.toml became invalid"),
        ("", "[sandbox]\nmemory_mb = 1\n", "became_invalid", "workspace.toml became invalid"),
        ("[nope]\n", "[sandbox\n", "still_invalid", "workspace.toml is still invalid"),
        ("[sandbox\n", None, "became_valid", "workspace.toml was invalid and is valid again."),
    ],
)
def test_contract_says_when_the_file_is_invalid(before, after, kind, start):
    found = contract.changes(before, after)
    assert found[0].kind == kind and found[0].message.startswith(start)
    if kind == "became_valid":
        assert {c.key for c in found[1:]} == {k for _, k in contract.KEYS}
        assert all(c.old is None for c in found[1:])
    else:
        assert len(found) == 1 and found[0].key is None
