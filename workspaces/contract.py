"""What a commit changes in the execution contract: the `[sandbox]` and `[network]`
values of `workspace.toml` that decide how every run of the workspace is isolated.

A reviewer must notice a commit that switches the runtime, raises a limit, swaps the
image or opens egress, however small its diff looks; `changes()` says exactly that.
"""

import json
import tomllib
from dataclasses import asdict, dataclass
from typing import Any

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
