"""The egress policy's pure parts (entries, the team ceiling, addresses), the proxy's
refusal before any connection, and the team ceiling's page and replay rules."""

import asyncio
import html
import ipaddress

import pytest

from accounts.access import Actor
from accounts.models import Activity
from runs import actions as run_actions
from sandbox.egress import policy
from sandbox.egress.attempts import Attempt, Budget, Refused
from sandbox.egress.policy import BadEntry, Rule
from sandbox.egress.proxy import Proxy
from tests.support.runs import set_toml
from workspaces import actions as workspace_actions


@pytest.mark.parametrize(
    "entry, rule",
    [
        ("pypi.org", Rule("pypi.org", False, (443, 80))),
        ("Files.Test:8080", Rule("files.test", False, (8080,))),
        ("*.pythonhosted.org", Rule("pythonhosted.org", True, (443, 80))),
        ("*.example.com:8443", Rule("example.com", True, (8443,))),
        ("example.com.", Rule("example.com", False, (443, 80))),
    ],
)
def test_entries_parse_with_default_ports(entry, rule):
    assert Rule.parse(entry) == rule


@pytest.mark.parametrize(
    "entry",
    [
        "",
        "*.",
        "http://pypi.org",
        "a b",
        "pypi.org:0",
        "pypi.org:65536",
        "*",
        "*.*.org",
        "pypi.org:https",
        "-bad.org",
        "[::1]:443",
    ],
)
def test_bad_entries_are_refused_with_what_to_write(entry):
    with pytest.raises(BadEntry, match=r'use "host", "host:port" or "\*.domain"'):
        Rule.parse(entry)


def test_what_an_entry_allows():
    wild = ["*.example.com"]
    assert policy.allows(wild, "a.example.com", 443)
    assert policy.allows(wild, "a.b.example.com", 80)
    assert policy.allows(wild, "A.Example.COM.", 443)
    assert not policy.allows(wild, "example.com", 443)  # the apex is not below itself
    assert not policy.allows(wild, "badexample.com", 443)
    assert not policy.allows(wild, "a.example.com", 8080)
    assert policy.allows(["files.test:8080"], "files.test", 8080)
    assert not policy.allows(["files.test:8080"], "files.test", 80)
    assert not policy.allows([], "files.test", 80)


def test_a_workspace_can_only_narrow_the_team_ceiling():
    ceiling = ["*.example.com", "pypi.org"]
    applied, ignored = policy.narrow(
        [
            "a.example.com",
            "*.b.example.com",
            "example.com",
            "pypi.org:443",
            "pypi.org:8443",
            "*.pypi.org",
            "*.example.com:8080",
        ],
        ceiling,
    )
    assert applied == ["a.example.com", "*.b.example.com", "pypi.org:443"]
    assert ignored == ["example.com", "pypi.org:8443", "*.pypi.org", "*.example.com:8080"]
    assert policy.narrow(["pypi.org"], []) == ([], ["pypi.org"])  # no ceiling: nothing


def test_the_run_contract_says_what_applied_and_what_was_ignored():
    network, warnings = policy.for_run(["pypi.org", "evil.test"], ["pypi.org"])
    assert network == {
        "mode": "proxy",
        "egress": ["pypi.org"],
        "requested": ["pypi.org", "evil.test"],
        "ignored": ["evil.test"],
        "proxy": "http://127.0.0.1:3128",
    }
    assert warnings == [
        '[network] egress entry "evil.test" is outside the team\'s egress '
        "ceiling, so it is ignored; a team admin can add it to the ceiling "
        "on the team's members page."
    ]
    assert policy.for_run([], ["pypi.org"])[0]["mode"] == "none"


@pytest.mark.parametrize(
    "address, allowed",
    [
        ("127.0.0.1", False),
        ("10.1.2.3", False),
        ("172.16.0.1", False),
        ("192.168.1.1", False),
        ("169.254.169.254", False),
        ("100.64.0.1", False),
        ("0.0.0.0", False),
        ("224.0.0.1", False),
        ("240.0.0.1", False),
        ("255.255.255.255", False),
        ("::1", False),
        ("fe80::1", False),
        ("fc00::1", False),
        ("::ffff:127.0.0.1", False),
        ("ff02::1", False),
        ("93.184.215.14", True),
        ("2606:4700::6810:84e5", True),
    ],
)
def test_only_public_unicast_addresses_are_reachable_by_default(settings, address, allowed):
    settings.EGRESS_ALLOWED_ADDRESSES = []
    assert policy.address_allowed(ipaddress.ip_address(address)) is allowed


def test_the_operator_may_allow_an_address_or_a_network(settings):
    settings.EGRESS_ALLOWED_ADDRESSES = ["127.0.0.1", "10.9.0.0/16"]
    assert policy.address_allowed(ipaddress.ip_address("127.0.0.1"))
    assert policy.address_allowed(ipaddress.ip_address("::ffff:127.0.0.1"))
    assert policy.address_allowed(ipaddress.ip_address("10.9.4.2"))
    assert not policy.address_allowed(ipaddress.ip_address("127.0.0.2"))
    assert not policy.address_allowed(ipaddress.ip_address("169.254.169.254"))


def test_static_mappings_come_before_dns(settings):
    settings.EGRESS_HOSTS = {"files.test": "127.0.0.1"}
    assert policy.static_address("FILES.test.") == ipaddress.ip_address("127.0.0.1")
    assert policy.static_address("203.0.113.9") == ipaddress.ip_address("203.0.113.9")
    assert policy.static_address("pypi.org") is None


def test_a_refused_address_is_never_connected_to(settings, monkeypatch):
    """The check comes before the connection: asyncio's connect must not even be called
    (the stack test cannot watch for traffic to 169.254.169.254 without sending some)."""
    settings.EGRESS_HOSTS = {"meta.test": "169.254.169.254"}
    settings.EGRESS_ALLOWED_ADDRESSES = []

    async def no_connect(*args, **kwargs):
        raise AssertionError("the proxy tried to connect")

    monkeypatch.setattr(asyncio, "open_connection", no_connect)
    proxy = Proxy(["meta.test"], Budget(1 << 20, 4), record=lambda attempt: None)
    attempt = Attempt("GET", "meta.test", 80)
    with pytest.raises(Refused) as refused:
        asyncio.run(proxy._open(attempt))
    assert (refused.value.reason, refused.value.status) == ("address_not_allowed", 403)
    assert attempt.address == "169.254.169.254" and not attempt.allowed


# -- the ceiling's page, and what a replay gets -------------------------------------------


def test_an_admin_sets_the_ceiling_on_the_members_page(signed_in, cast):
    alice = signed_in(cast.alice)
    page = alice.get("/t/team-a/members/").content.decode()
    assert 'name="egress_ceiling"' in page
    r = alice.post(
        "/t/team-a/policies/egress/",
        {"egress_ceiling": "PyPI.org\n*.pythonhosted.org, registry.npmjs.org\n\n"},
        follow=True,
    )
    assert (
        "Egress ceiling saved: pypi.org, *.pythonhosted.org, registry.npmjs.org"
        in r.content.decode()
    )
    cast.team_a.refresh_from_db()
    assert cast.team_a.egress_ceiling == ["pypi.org", "*.pythonhosted.org", "registry.npmjs.org"]
    [row] = Activity.objects.filter(verb="team.egress_ceiling_changed")
    assert row.user == cast.alice and row.detail["after"] == cast.team_a.egress_ceiling

    r = alice.post(
        "/t/team-a/policies/egress/", {"egress_ceiling": "pypi.org\nhttp://x"}, follow=True
    )
    assert 'Egress ceiling not saved: "http://x" is not an egress entry' in html.unescape(
        r.content.decode()
    )
    cast.team_a.refresh_from_db()
    assert cast.team_a.egress_ceiling == ["pypi.org", "*.pythonhosted.org", "registry.npmjs.org"]


def test_only_an_admin_may_change_the_ceiling(signed_in, cast):
    r = signed_in(cast.carol).post("/t/team-a/policies/egress/", {"egress_ceiling": "x.org"})
    assert r.status_code == 403
    cast.team_a.refresh_from_db()
    assert cast.team_a.egress_ceiling == []
    r = signed_in(cast.charlie).post("/t/team-a/policies/egress/", {"egress_ceiling": "x.org"})
    assert r.status_code == 404


def test_a_replay_is_bounded_by_todays_ceiling(cast):
    shop = workspace_actions.create_workspace(
        cast.team_a, Actor(cast.carol), "Shop", "shop", "python-http"
    )
    # Written by the team's admin, approved by a reviewer (a write approves nothing).
    set_toml(shop, cast, '[network]\negress = ["pypi.org", "files.test:81"]\n')
    cast.team_a.egress_ceiling = ["pypi.org", "*.test:81"]
    cast.team_a.save()
    first = run_actions.start_run(shop, Actor(cast.carol), "true")
    assert first.network["egress"] == ["pypi.org", "files.test:81"]
    cast.team_a.egress_ceiling = ["pypi.org"]
    cast.team_a.save()
    again = run_actions.rerun(first, Actor(cast.carol))
    assert again.network["egress"] == ["pypi.org"]
    assert again.network["ignored"] == ["files.test:81"]
    assert any('"files.test:81" is outside' in w for w in again.warnings)
