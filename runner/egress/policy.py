"""Who may be reached: allowlist entries, the team ceiling, and address checks.

Entries are `host`, `host:port` or `*.domain[:port]`; without a port an entry allows
443 and 80. `*.example.com` covers every name below example.com, not example.com
itself. A team's ceiling bounds every workspace of the team: a workspace entry counts
only if everything it allows is allowed by some ceiling entry.

Names are checked first, addresses after resolving: a name on the list that resolves
to loopback, private, link-local (169.254.169.254 included), multicast or reserved
space is still refused, unless the operator listed that address. The proxy connects
to the very address it checked, so a second lookup cannot swap it (DNS rebinding).
"""

import ipaddress
import re
from dataclasses import dataclass
from functools import cache

from django.conf import settings

DEFAULT_PORTS = (443, 80)
PROXY_PORT = 3128  # inside each sandbox's namespace, on its loopback
_LABEL = r"[a-z0-9]([a-z0-9-]*[a-z0-9])?"
_ENTRY = re.compile(rf"^(?P<wild>\*\.)?(?P<host>{_LABEL}(\.{_LABEL})*)(:(?P<port>\d{{1,5}}))?$")

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class BadEntry(ValueError):
    """An entry that is not `host`, `host:port` or `*.domain`; the message says so."""


@dataclass(frozen=True)
class Rule:
    host: str  # the name, or the domain below which a wildcard matches
    wildcard: bool
    ports: tuple[int, ...]

    @classmethod
    def parse(cls, entry: str) -> "Rule":
        m = _ENTRY.match(entry.strip().lower().rstrip("."))
        port = int(m.group("port")) if m and m.group("port") else None
        if m is None or (port is not None and not 1 <= port <= 65535):
            raise BadEntry(
                f'"{entry}" is not an egress entry: use "host", "host:port" or '
                '"*.domain" (ports 1 to 65535).'
            )
        return cls(m.group("host"), bool(m.group("wild")), (port,) if port else DEFAULT_PORTS)

    def matches_host(self, host: str) -> bool:
        return host.endswith("." + self.host) if self.wildcard else host == self.host

    def allows(self, host: str, port: int) -> bool:
        return port in self.ports and self.matches_host(host)

    def within(self, other: "Rule") -> bool:
        """Everything this rule allows, `other` allows too."""
        if not set(self.ports) <= set(other.ports):
            return False
        if self.wildcard:
            return other.wildcard and (
                self.host == other.host or self.host.endswith("." + other.host)
            )
        return other.matches_host(self.host)


def check_entries(entries: list[str]) -> list[str]:
    """The entries, cleaned (lower case, no trailing dot), or BadEntry for the first bad."""
    for entry in entries:
        Rule.parse(entry)
    return [entry.strip().lower().rstrip(".") for entry in entries]


def narrow(requested: list[str], ceiling: list[str]) -> tuple[list[str], list[str]]:
    """(entries that apply, entries ignored because the ceiling does not cover them)."""
    bounds = [Rule.parse(e) for e in ceiling]
    applied: list[str] = []
    ignored: list[str] = []
    for entry in requested:
        rule = Rule.parse(entry)
        (applied if any(rule.within(b) for b in bounds) else ignored).append(entry)
    return applied, ignored


def allows(entries: list[str], host: str, port: int) -> bool:
    host = host.lower().rstrip(".")
    return any(Rule.parse(e).allows(host, port) for e in entries)


@cache
def _allowed_networks(
    listed: tuple[str, ...],
) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(item, strict=False) for item in listed)


def address_allowed(address: Address) -> bool:
    """Public unicast addresses, and whatever the operator allowed by name."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    if any(address in net for net in _allowed_networks(tuple(settings.EGRESS_ALLOWED_ADDRESSES))):
        return True
    return address.is_global and not address.is_multicast


def static_address(host: str) -> Address | None:
    """An IP literal, or a name the operator mapped (consulted before DNS)."""
    mapped = settings.EGRESS_HOSTS.get(host.lower().rstrip("."))
    try:
        return ipaddress.ip_address(mapped or host.strip("[]"))
    except ValueError:
        return None


def how_to_allow(host: str, port: int) -> str:
    entry = host if port in DEFAULT_PORTS else f"{host}:{port}"
    return (
        f'add "{entry}" to [network] egress in workspace.toml (a team admin must '
        "first allow it in the team's egress ceiling)"
    )


def for_run(requested: list[str], ceiling: list[str]) -> tuple[dict[str, object], list[str]]:
    """The network part of a run's contract, and a warning per ignored entry."""
    applied, ignored = narrow(requested, ceiling)
    network: dict[str, object] = {
        "mode": "proxy" if applied else "none",
        "egress": applied,
        "requested": list(requested),
        "ignored": ignored,
    }
    if applied:
        network["proxy"] = f"http://127.0.0.1:{PROXY_PORT}"
    warnings = [
        f'[network] egress entry "{entry}" is outside the team\'s egress ceiling, so '
        "it is ignored; a team admin can add it to the ceiling on the team's members "
        "page."
        for entry in ignored
    ]
    return network, warnings
