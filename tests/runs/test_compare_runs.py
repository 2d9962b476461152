"""compare_runs on its own: a run beside the one it replays, row by row."""

from datetime import timedelta

from django.utils import timezone

from runs.compare import compare_runs
from runs.models import Run, RunState
from tests.support.runs import CHANGES


def a_run(**fields) -> Run:
    t0 = timezone.now()
    return Run(
        **{
            "commit": "a" * 40,
            "command": "make test",
            "image": "img",
            "image_id": "sha256:" + "1" * 64,
            "runtime": "runc",
            "limits": {"cpus": 1.0, "timeout_s": 600},
            "state": RunState.SUCCEEDED,
            "reason": "exit_zero",
            "exit_code": 0,
            "log_entries": 10,
            "process_started_at": t0,
            "finished_at": t0 + timedelta(seconds=2),
            "changes": CHANGES,
            "artifacts": [{"path": "d/a", "size": 1, "sha256": "f" * 64}],
            **fields,
        }
    )


def by_label(rows) -> dict:
    return {row.label: row for row in rows}


def test_a_faithful_replay_compares_equal_except_its_duration():
    rows = compare_runs(a_run(), a_run(finished_at=timezone.now() + timedelta(minutes=5)))
    assert [r.label for r in rows] == [
        "State",
        "Reason",
        "Exit code",
        "Duration",
        "Log entries",
        "Setup",
        "Changed files",
        "Artifacts",
        "Commit",
        "Image",
        "Command",
        "Runtime",
        "Limits",
        "Env names",
        "Secrets",
    ]
    assert {r.label for r in rows if r.same is not True} == {"Duration"}
    rows = by_label(rows)
    assert rows["Duration"].same is None and rows["Duration"].this == "2.00 s"
    assert rows["Artifacts"].note == "same sha256" and rows["Artifacts"].this == "1 file"
    assert rows["Image"].this == "img @ 111111111111"
    assert {r.kind for r in rows.values()} == {"outcome", "input"}


def test_different_outcomes_and_inputs_are_named():
    this = a_run(
        state=RunState.FAILED,
        reason="exit_nonzero",
        exit_code=2,
        log_entries=12,
        limits={"cpus": 1.0, "timeout_s": 30},
        commit="b" * 40,
        changes={**CHANGES, "diff": "other"},
        artifacts=[
            {"path": "d/a", "size": 1, "sha256": "0" * 64},
            {"path": "d/new", "size": 1, "sha256": "0" * 64},
        ],
    )
    other = a_run(public_id="original0001")
    rows = by_label(compare_runs(this, other))
    for label in (
        "State",
        "Reason",
        "Exit code",
        "Log entries",
        "Changed files",
        "Artifacts",
        "Commit",
        "Limits",
    ):
        assert rows[label].same is False, label
    assert (rows["Exit code"].this, rows["Exit code"].other) == ("2", "0")
    assert rows["Changed files"].note == "same files, different content"
    assert rows["Artifacts"].note == "sha256 differs: d/a; only this run: d/new"
    assert rows["Limits"].note == "timeout_s 600 → 30"
    assert rows["Commit"].this == "b" * 12
    assert rows["Command"].same and rows["Runtime"].same


def test_a_run_still_going_is_compared_on_what_is_known():
    this = a_run(
        state=RunState.RUNNING,
        reason="",
        exit_code=None,
        log_entries=0,
        finished_at=None,
        changes=None,
        artifacts=[],
        image_id="",
        setup={"command": "make deps"},
    )
    rows = by_label(compare_runs(this, a_run(setup={"command": "make deps", "hit": False})))
    assert (rows["Exit code"].this, rows["Log entries"].this) == ("—", "—")
    assert rows["Log entries"].same is None and rows["Duration"].this == "—"
    assert rows["Changed files"].this == "—" and rows["Changed files"].same is False
    assert rows["Image"].same is None and rows["Image"].this == "img (not resolved)"
    assert (rows["Setup"].this, rows["Setup"].other) == ("—", "ran")
