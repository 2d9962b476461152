"""Whether a failed command or [setup] step failed on the network, and what would let
the destination through: the finding a run's end records (`Run.network_failure`) and
its message says in words (runs.outcomes.network_message).

A sandbox has no network unless its workspace lists hosts in `[network] egress` of
workspace.toml, within the team's egress ceiling; then it reaches those only through
Berth's proxy, which records every refusal (EgressEvent). What a tool prints when it
cannot reach the network (DNS failures, refused or unreachable connections, the
proxy's 403) shows the rest.
"""

import re
from typing import Any

from pydantic import Field

from accounts.egress import DEFAULT_PORTS, BadEntry, Rule
from core.schemas import Out
from logs import shipped
from runs.models import EgressEvent, Run

TAIL = 200  # log entries read back from the end; pip retries print long before its end
LINE_MAX = 300

# What tools print when the network is not there (pip and Python, npm and Node, curl,
# wget, git, apt, Go) or when Berth's proxy refused them.
SIGNS = re.compile(
    r"Temporary failure in name resolution|Name or service not known"
    r"|nodename nor servname provided|getaddrinfo failed|Network is unreachable"
    r"|Connection refused|ECONNREFUSED|ENOTFOUND|EAI_AGAIN|ENETUNREACH"
    r"|Could not resolve (host|proxy|hostname)|Couldn't resolve host|Temporary failure resolving"
    r"|unable to resolve host address|dial tcp: lookup|Failed to establish a new connection"
    r"|x-berth-egress|Tunnel connection failed|CONNECT tunnel failed"
    r"|to \[network\] egress in workspace\.toml",
    re.IGNORECASE,
)
# Berth's proxy refused it (its 403 as curl, pip and others print it): the refusal's
# record may still be on its way when the run ends.
PROXY_REFUSAL = re.compile(
    r"x-berth-egress|Tunnel connection failed: 403|CONNECT tunnel failed, response 403"
    r"|to \[network\] egress in workspace\.toml",
    re.IGNORECASE,
)
# A refused connection to the sandbox's own loopback (a test server not yet up) says
# nothing about the network.
LOOPBACK = re.compile(r"127\.0\.0\.1|localhost|\[::1\]|::1:", re.IGNORECASE)
LOCAL_SIGNS = re.compile(
    r"Connection refused|ECONNREFUSED|Failed to establish a new connection", re.IGNORECASE
)
# Where a line names the host it tried.
HOST_IN_LINE = re.compile(
    r"Could not resolve host(?:name)?:?\s+'?(?P<a>[A-Za-z0-9.-]+)"
    r"|(?:ENOTFOUND|EAI_AGAIN)\s+(?P<b>[A-Za-z0-9.-]+)"
    r"|host='(?P<c>[A-Za-z0-9.-]+)'"
    r"|Temporary failure resolving '(?P<d>[A-Za-z0-9.-]+)'"
    r"|lookup (?P<e>[A-Za-z0-9.-]+)(?: on \S+)?: "
    r"|unable to resolve host address '(?P<g>[A-Za-z0-9.-]+)'"
    r"|(?P<f>[A-Za-z0-9.-]+):\d+ is not on this sandbox's egress allowlist"
)
# A host that is never enough alone: pip finds its files on another.
COMPANIONS = {"pypi.org": ["files.pythonhosted.org"]}
# The proxy's refusals that mean "not reachable from here", as opposed to a cap.
REFUSALS = ("not_allowed", "address_not_allowed", "resolve_failed", "connect_failed")


def find(run: Run) -> dict[str, Any] | None:
    """What shows that `run`, which failed, failed on the network, or None.

    1. The egress proxy's refusals of this phase (setup or main), as recorded so far.
    2. The last TAIL lines of the log, newest first, for a line a tool prints when the
       network is not there, or when the proxy refused it.
    3. Kind `egress_denied` if the proxy refused (recorded, or its 403 in the log),
       else `no_network` when the sandbox had none, `unreachable` when it had the
       proxy (the tool went around it).
    4. Each destination is named with the entry that would allow it, and whether the
       team's egress ceiling allows that entry (if not, a team admin must add it first).
    """
    refused = list(
        EgressEvent.objects.filter(
            run=run, allowed=False, reason__in=REFUSALS, phase=run.phase or "main"
        )
        .order_by("started_at", "id")
        .values_list("host", "port", "reason")[:20]
    )
    evidence = _log_sign(run.public_id)
    if not refused and evidence is None:
        return None
    hosts: list[tuple[str, int | None, str]] = []
    for host, port, reason in refused:
        if host and (host, port, reason) not in hosts:
            hosts.append((host, port, reason))
    if evidence and (named := host_named(evidence)) and all(h != named for h, _, _ in hosts):
        hosts.append((named, None, ""))
    for main, extra in COMPANIONS.items():
        if any(h == main for h, _, _ in hosts):
            hosts += [(e, None, "") for e in extra if all(h != e for h, _, _ in hosts)]
    if refused or (evidence and PROXY_REFUSAL.search(evidence)):
        kind = "egress_denied"
    else:
        kind = "unreachable" if run.network.get("mode") == "proxy" else "no_network"
    ceiling = list(run.workspace.team.egress_ceiling or [])
    return {
        "kind": kind,
        "phase": run.phase or "main",
        "evidence": evidence or "; ".join(f"{h}:{p} refused ({r})" for h, p, r in refused[:3] if h),
        "destinations": [_destination(h, p, r, ceiling) for h, p, r in hosts[:10]],
    }


def _destination(host: str, port: int | None, refused: str, ceiling: list[str]) -> dict[str, Any]:
    entry = host if port is None or port in DEFAULT_PORTS else f"{host}:{port}"
    try:
        rule = Rule.parse(entry)
        inside = any(rule.within(Rule.parse(c)) for c in ceiling)
    except BadEntry:
        inside = False
    return {"host": host, "port": port, "refused": refused, "entry": entry, "in_ceiling": inside}


def says_no_network(line: str) -> bool:
    """Whether a line of output is a tool saying it could not reach the network."""
    signs = [m.group(0) for m in SIGNS.finditer(line)]
    return bool(signs) and not (
        LOOPBACK.search(line) and all(LOCAL_SIGNS.fullmatch(s) for s in signs)
    )


def host_named(line: str) -> str | None:
    named = HOST_IN_LINE.search(line)
    return next(g for g in named.groups() if g).lower().rstrip(".") if named else None


def _log_sign(run_id: str) -> str | None:
    entries = shipped.tail(shipped.run_log(run_id), TAIL)  # read by the run's agent
    for entry in reversed(entries):
        if entry["stream"] != "system" and says_no_network(entry["text"]):
            return entry["text"].strip()[:LINE_MAX]
    return None


# -- the contract (runs.schemas.RunOut.network_failure, on the API and over MCP) --------


class NetworkDestination(Out):
    host: str
    port: int | None = Field(description="as the proxy saw it; none when read from the log")
    refused: str = Field(description="the proxy's reason (not_allowed, ...); empty if none")
    entry: str = Field(description="the [network] egress entry that would allow it")
    in_ceiling: bool = Field(
        description="the team's egress ceiling allows that entry (if not, a team admin "
        "must add it there first)"
    )


class NetworkFailure(Out):
    """A command or [setup] step that failed on the network, and how to let it through."""

    kind: str = Field(
        description="no_network (the sandbox had none), egress_denied (Berth's egress "
        "proxy refused a destination) or unreachable (it had the proxy, and the tool "
        "still could not reach the network)"
    )
    phase: str = Field(description="setup or main")
    evidence: str = Field(description="the log line, or the refusals, that showed it")
    destinations: list[NetworkDestination] = Field(
        description="where it tried to go, where the proxy or the log named it"
    )
    how_to_allow: str = Field(
        description="in words: [network] egress in workspace.toml, within the team's "
        "egress ceiling (the run's message says it too)"
    )

    @classmethod
    def of(cls, run: Run) -> "NetworkFailure | None":
        if not run.network_failure:
            return None
        return cls.model_validate(run.network_failure)
