"""Who may be reached: allowlist entries (their grammar is accounts.egress), the team
ceiling, and address checks.

Names are checked first, addresses after resolving: a name on the list that resolves
to loopback, private, link-local (169.254.169.254 included), multicast or reserved
space is still refused, unless the operator listed that address. The proxy connects
to the very address it checked, so a second lookup cannot swap it (DNS rebinding).
"""

import ipaddress
from functools import cache

from django.conf import settings

from accounts.egress import DEFAULT_PORTS, BadEntry, Rule, check_entries, narrow

__all__ = ["DEFAULT_PORTS", "BadEntry", "Rule", "check_entries", "narrow"]

PROXY_PORT = 3128  # inside each sandbox's namespace, on its loopback

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


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
