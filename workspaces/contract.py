"""The execution contract: the `[sandbox]` and `[network]` values of `workspace.toml`
that decide how every run of the workspace is isolated.

A reviewer must notice a commit that switches the runtime, raises a limit, swaps the
image or opens egress, however small its diff looks; `changes()` says exactly that, for
a commit's history. What a run, a preview or a release build *asks for* (`asked()`,
the file's values plus a request's overrides) is compared with the last approved
contract by `widenings()`: what it would let a sandbox do that the approved one did not
(workspaces.reviews holds such an ask until a person approves it).
"""

import hashlib
import json
import tomllib
from dataclasses import asdict, dataclass, field
from typing import Any

from django.conf import settings

from accounts.egress import Rule, narrow
from core.errors import NotFound
from workspaces import config as workspace_config
from workspaces.gitstore import MODE_SUBMODULE, MODE_TREE, GitStore

# The (section, key) pairs that make up the contract, in the order the notice lists them.
KEYS: tuple[tuple[str, str], ...] = (
    ("sandbox", "image"),
    ("sandbox", "runtime"),
    ("sandbox", "cpus"),
    ("sandbox", "memory_mb"),
    ("sandbox", "disk_mb"),
    ("sandbox", "timeout_s"),
    ("network", "egress"),
)


@dataclass(frozen=True)
class ContractChange:
    """One line of the notice. `kind` is "changed" (a value: `old` → `new`),
    "became_invalid", "became_valid" or "still_invalid" (the file as a whole; runs of
    a commit with an invalid file are refused, so that is a change too)."""

    kind: str
    message: str
    section: str | None = None
    key: str | None = None
    old: Any = None
    new: Any = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class _Side:
    values: dict[tuple[str, str], Any] | None  # None: the file is invalid
    explicit: frozenset[tuple[str, str]] = frozenset()
    error: str = ""


def _read(text: str | None) -> _Side:
    """The contract values one version of the file gives (defaults when absent)."""
    try:
        config = workspace_config.parse(text or "")
    except workspace_config.ConfigError as e:
        return _Side(None, error=e.message)
    raw = tomllib.loads(text or "")  # parse() accepted it, so this cannot fail
    values: dict[tuple[str, str], Any] = {}
    for section, key in KEYS:
        value = (
            config.egress
            if (section, key) == ("network", "egress")
            else getattr(config.sandbox, key)
        )
        values[section, key] = list(value) if isinstance(value, tuple) else value
    explicit = frozenset((s, k) for s, k in KEYS if k in raw.get(s, {}))
    return _Side(values, explicit)


def _show(value: Any, explicit: bool) -> str:
    return json.dumps(value) + ("" if explicit else " (default)")


def changes(before: str | None, after: str | None) -> list[ContractChange]:
    """The contract changes from one text of `workspace.toml` to another; `None` means
    the file is absent (every key takes its default).

    1. Each side is parsed as a run would parse it; an invalid side has no values.
    2. An invalid side is said as such, with the error of the new text.
    3. Every key whose effective value differs is listed, old → new, a value that only
       came from a default marked so; a key merely written out with its default value
       is no change. When the old side was invalid its values are unknown (`old` None),
       so every key of the new side is listed.
    """
    if before == after:
        return []
    old, new = _read(before), _read(after)
    if new.values is None:
        kind, verb = (
            ("still_invalid", "is still") if old.values is None else ("became_invalid", "became")
        )
        return [
            ContractChange(
                kind,
                f"{workspace_config.FILENAME} {verb} invalid, so runs "
                f"of this commit are refused: {new.error}",
            )
        ]
    out: list[ContractChange] = []
    if old.values is None:
        out.append(
            ContractChange(
                "became_valid", f"{workspace_config.FILENAME} was invalid and is valid again."
            )
        )
    for section, key in KEYS:
        value = new.values[section, key]
        shown_new = _show(value, (section, key) in new.explicit)
        if old.values is None:
            out.append(
                ContractChange(
                    "changed",
                    f"[{section}] {key}: (invalid) → {shown_new}",
                    section,
                    key,
                    None,
                    value,
                )
            )
        elif old.values[section, key] != value:
            was = old.values[section, key]
            shown_old = _show(was, (section, key) in old.explicit)
            out.append(
                ContractChange(
                    "changed",
                    f"[{section}] {key}: {shown_old} → {shown_new}",
                    section,
                    key,
                    was,
                    value,
                )
            )
    return out


def text_at(store: GitStore, commit: str) -> str | None:
    """`workspace.toml` at a commit as a run reads it (runs.actions.load_config): a
    folder (or a submodule) of that name is no file, bytes that are not UTF-8 are
    replaced, so they fail the parse."""
    try:
        mode, sha = store.lookup(commit, workspace_config.FILENAME)
    except NotFound:
        return None
    if mode in (MODE_TREE, MODE_SUBMODULE):
        return None
    return store.blob(sha).decode("utf-8", "replace")


def commit_changes(store: GitStore, sha: str) -> list[ContractChange]:
    """What a commit changes against its first parent (a first commit: against no file)."""
    parents = store.commit(sha).parents
    before = text_at(store, parents[0].decode()) if parents else None
    return changes(before, text_at(store, sha))


# -- what an execution asks for, and whether it widens the approved -------------------------

LIMIT_KEYS = ("cpus", "memory_mb", "disk_mb", "timeout_s")
Values = dict[str, Any]  # key (KEYS' second half) -> value; egress a sorted list


def asked(
    config: workspace_config.WorkspaceConfig,
    runtime: str | None = None,
    timeout_s: int | None = None,
) -> Values:
    """The contract an execution asks for: the file's values, with a request's runtime
    and timeout over them. As asked, before a team policy or the operator's maxima
    bound it: a later change of a ceiling, a maximum or a gVisor policy must never turn
    an unreviewed ask on by itself."""
    values: Values = {key: getattr(config.sandbox, key) for section, key in KEYS[:-1]}
    values["egress"] = sorted(set(config.egress))
    if runtime:
        values["runtime"] = runtime
    if timeout_s is not None:
        values["timeout_s"] = timeout_s
    return values


def default_values() -> Values:
    """What a workspace with no approved contract may ask for: the defaults."""
    return asked(workspace_config.WorkspaceConfig())


def content_hash(values: Values) -> str:
    """Approvals are of this: the same contract on any branch, after a merge or a
    revert, is the same approval."""
    text = json.dumps(values, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Widening:
    """One item a reviewer decides on: `key` went from `before` to `after`, and why that
    lets a sandbox do more. For egress, `added` lists the entries the approved contract
    did not cover, and `outside_ceiling` those the team's ceiling would drop today."""

    key: str
    before: Any
    after: Any
    message: str
    added: list[str] = field(default_factory=list)
    outside_ceiling: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _uncovered(entries: list[str], approved: list[str]) -> list[str]:
    """Entries that allow something no approved entry allows (a new host, a port, a
    broader wildcard)."""
    rules = [Rule.parse(e) for e in approved]
    return [e for e in entries if not any(Rule.parse(e).within(r) for r in rules)]


def widenings(before: Values, after: Values, ceiling: list[str]) -> list[Widening]:
    """What `after` lets a sandbox do that `before` did not; empty when it asks for the
    same or less (narrowing never waits). A different image, gVisor to runc, a higher
    limit, an egress entry the approved entries do not cover (a new host or port, a
    broader wildcard)."""
    out: list[Widening] = []
    # The operator's default image is the operator's choice, for every workspace: asking
    # for it (or the operator changing it) is never a tenant's widening.
    if after["image"] != before["image"] and after["image"] != settings.SANDBOX_IMAGE:
        out.append(
            Widening(
                "image", before["image"], after["image"], f"a different image: {after['image']}"
            )
        )
    if before["runtime"] == "gvisor" and after["runtime"] == "runc":
        out.append(
            Widening(
                "runtime", "gvisor", "runc", "runc instead of gVisor: the host kernel, directly"
            )
        )
    for key in LIMIT_KEYS:
        if after[key] > before[key]:
            out.append(
                Widening(
                    key, before[key], after[key], f"{key} raised from {before[key]} to {after[key]}"
                )
            )
    added = _uncovered(after["egress"], before["egress"])
    if added:
        _, dropped = narrow(added, ceiling)
        out.append(
            Widening(
                "egress",
                before["egress"],
                after["egress"],
                "egress to " + ", ".join(added),
                added,
                dropped,
            )
        )
    return out
