"""The egress entry grammar, shared by a team's ceiling, `workspace.toml` and a run.

Entries are `host`, `host:port` or `*.domain[:port]`; without a port an entry allows
443 and 80. `*.example.com` covers every name below example.com, not example.com
itself. A team's ceiling bounds every workspace of the team: a workspace entry counts
only if everything it allows is allowed by some ceiling entry. What the proxy does with
the entries is in sandbox.egress.policy.
"""

import re
from dataclasses import dataclass

DEFAULT_PORTS = (443, 80)
_LABEL = r"[a-z0-9]([a-z0-9-]*[a-z0-9])?"
_ENTRY = re.compile(rf"^(?P<wild>\*\.)?(?P<host>{_LABEL}(\.{_LABEL})*)(:(?P<port>\d{{1,5}}))?$")


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
