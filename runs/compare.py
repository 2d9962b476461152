"""A run beside another — the run it replays, or its latest re-run — so a person sees
whether the inputs were the same and how the outcomes differ.

Pure: reads only the two rows' fields, never the engine, the log store or the database.
"""

from dataclasses import dataclass
from typing import Any

from runs.durations import took
from runs.models import Run

NONE = "—"
MAX_NAMED = 5


@dataclass(frozen=True)
class Row:
    label: str
    this: str
    other: str
    # None: expected to differ from run to run (a duration), shown but not judged.
    same: bool | None
    kind: str  # "outcome" (what came out) or "input" (what went in)
    note: str = ""


def compare_runs(this: Run, other: Run) -> list[Row]:
    """Outcome rows first (state, reason, exit code, duration, log, setup, changes,
    artifacts), then the inputs a replay repeats (commit, image id, command, runtime,
    limits, env and secret names)."""
    return [*_outcomes(this, other), *_inputs(this, other)]


def _row(label: str, this: Any, other: Any, kind: str, note: str = "") -> Row:
    a, b = _text(this), _text(other)
    return Row(label, a, b, this == other, kind, note)


def _text(value: Any) -> str:
    if value is None or value == "":
        return NONE
    return str(value)


def _outcomes(this: Run, other: Run) -> list[Row]:
    ended = not this.is_active and not other.is_active
    return [
        _row("State", this.state, other.state, "outcome"),
        _row("Reason", this.reason or None, other.reason or None, "outcome"),
        _row("Exit code", this.exit_code, other.exit_code, "outcome"),
        Row(
            "Duration",
            _text(_duration(this)),
            _text(_duration(other)),
            None,
            "outcome",
            "from the command's start to the end",
        ),
        Row(
            "Log entries",
            _log(this),
            _log(other),
            this.log_entries == other.log_entries if ended else None,
            "outcome",
        ),
        _row("Setup", _setup(this), _setup(other), "outcome"),
        _changes_row(this, other),
        _artifacts_row(this, other),
    ]


def _duration(run: Run) -> str:
    return took(run.process_started_at, run.finished_at)


def _log(run: Run) -> str:
    return NONE if run.is_active else str(run.log_entries)


def _setup(run: Run) -> str | None:
    if not run.setup.get("command"):
        return "none"
    hit = run.setup.get("hit")
    return "skipped (cache hit)" if hit is True else "ran" if hit is False else None


def _changed_paths(changes: dict[str, Any]) -> dict[str, list[Any]]:
    return {
        k: sorted(changes.get(k) or [], key=str)
        for k in ("added", "modified", "deleted", "renamed", "binary")
    }


def _changes_row(this: Run, other: Run) -> Row:
    a, b = this.changes, other.changes
    count_a = a["stats"]["files"] if a else None
    count_b = b["stats"]["files"] if b else None
    if a is None or b is None:
        return Row(
            "Changed files", _text(count_a), _text(count_b), a is None and b is None, "outcome"
        )
    same_paths = _changed_paths(a) == _changed_paths(b)
    same_diff = a.get("diff", "") == b.get("diff", "")
    note = (
        "same files, different content"
        if same_paths and not same_diff
        else "different files"
        if not same_paths
        else ""
    )
    return Row(
        "Changed files", str(count_a), str(count_b), same_paths and same_diff, "outcome", note
    )


def _artifacts_row(this: Run, other: Run) -> Row:
    """Equal when both kept the same paths with the same sha256: byte for byte."""
    a = {x["path"]: x["sha256"] for x in this.artifacts}
    b = {x["path"]: x["sha256"] for x in other.artifacts}

    def files(n: int) -> str:
        return f"{n} file{'' if n == 1 else 's'}"

    parts = []
    differ = sorted(p for p in a.keys() & b.keys() if a[p] != b[p])
    for label, paths in (
        ("sha256 differs", differ),
        ("only this run", sorted(a.keys() - b.keys())),
        (f"only run {other.public_id}", sorted(b.keys() - a.keys())),
    ):
        if paths:
            more = f" and {len(paths) - MAX_NAMED} more" if len(paths) > MAX_NAMED else ""
            parts.append(f"{label}: {', '.join(paths[:MAX_NAMED])}{more}")
    if a and a == b:
        parts.append("same sha256")
    return Row("Artifacts", files(len(a)), files(len(b)), a == b, "outcome", "; ".join(parts))


def _inputs(this: Run, other: Run) -> list[Row]:
    return [
        Row("Commit", this.commit[:12], other.commit[:12], this.commit == other.commit, "input"),
        _image_row(this, other),
        Row(
            "Command",
            _short(this.command),
            _short(other.command),
            this.command == other.command,
            "input",
        ),
        _row("Runtime", this.runtime, other.runtime, "input"),
        _limits_row(this, other),
        _row(
            "Env names",
            ", ".join(this.env_names) or "none",
            ", ".join(other.env_names) or "none",
            "input",
            "values are not kept" if this.env_names or other.env_names else "",
        ),
        _row(
            "Secrets",
            ", ".join(this.secret_names) or "none",
            ", ".join(other.secret_names) or "none",
            "input",
        ),
    ]


def _short(command: str, n: int = 80) -> str:
    line = command.strip()
    return line if len(line) <= n else line[: n - 1] + "…"


def _image_row(this: Run, other: Run) -> Row:
    def short(run: Run) -> str:
        if not run.image_id:
            return f"{run.image} (not resolved)"
        return f"{run.image} @ {run.image_id.removeprefix('sha256:')[:12]}"

    # Before the sandbox exists there is no id yet: equal names are all that is known.
    same = this.image_id == other.image_id if this.image_id and other.image_id else None
    if same is None and this.image != other.image:
        same = False
    return Row("Image", short(this), short(other), same, "input")


def _limits_row(this: Run, other: Run) -> Row:
    def text(limits: dict[str, Any]) -> str:
        return (
            ", ".join(
                f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}"
                for k, v in sorted(limits.items())
            )
            or "none"
        )

    keys = sorted(this.limits.keys() | other.limits.keys())
    changed = [
        f"{k} {other.limits.get(k, NONE)} → {this.limits.get(k, NONE)}"
        for k in keys
        if this.limits.get(k) != other.limits.get(k)
    ]
    return Row(
        "Limits", text(this.limits), text(other.limits), not changed, "input", "; ".join(changed)
    )
