"""What the run page shows besides its status and log: the setup step, the files it
changed, the artifacts it kept, the names it was granted, and how it compares with the
run it replays (or its latest re-run). Built from the run row alone."""

import re
from typing import Any

from django.urls import reverse

from runs.compare import compare_runs
from runs.models import Run
from workspaces.history_views import diff_lines
from workspaces.models import Workspace
from workspaces.views import page_url

HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")


def sections(run: Run, workspace: Workspace) -> dict[str, Any]:
    return {
        "setup": setup_section(run),
        "network": network_section(run, workspace),
        "changes": changes_section(run),
        "artifacts": artifacts_section(run, workspace),
        "comparison": comparison_section(run, workspace),
    }


EGRESS_REASONS = {
    "not_allowed": "refused: not on the allowlist",
    "address_not_allowed": "refused: its address may not be reached",
    "resolve_failed": "failed: the name does not resolve",
    "connect_failed": "failed: could not connect",
    "connection_cap": "refused: too many connections at once",
    "sandbox_connection_cap": "refused: too many connections open to the proxy",
    "team_connection_cap": "refused: the team has too many connections open to its proxies",
    "agent_connection_cap": "refused: the host's proxies hold all the connections they may",
    "refusal_flood": "closed unanswered: more refusals in that second than "
    "EGRESS_MAX_REFUSALS_PER_S",
    "byte_cap": "cut: the run's egress allowance is used up",
    "idle_timeout": "closed: idle too long",
    "bad_upstream": "failed: no valid HTTP answer",
}
EVENTS_SHOWN = 100


def network_section(run: Run, workspace: Workspace) -> dict[str, Any]:
    """The egress policy that applied and the connections tried, first ones first."""
    shown = (
        list(run.egress_events.all()[:EVENTS_SHOWN]) if run.network.get("mode") == "proxy" else []
    )
    events = [
        {"event": e, "outcome": EGRESS_REASONS.get(e.reason, e.reason) if e.reason else "allowed"}
        for e in shown
    ]
    return {
        "mode": run.network.get("mode", "none"),
        "egress": run.network.get("egress", []),
        "ignored": run.network.get("ignored", []),
        "events": events,
        "more": max(0, run.egress_connections + run.egress_denied - sum(e.count for e in shown)),
        "failure": failure_box(run, workspace),
    }


def failure_box(run: Run, workspace: Workspace) -> dict[str, Any] | None:
    """A run that failed on the network: the `[network]` block that would let its
    destinations through, beside the egress list it already had."""
    failure = run.network_failure
    if not failure:
        return None
    entries = list(run.network.get("egress", []))
    entries += [d["entry"] for d in failure["destinations"] if d["entry"] not in entries]
    listed = ", ".join(f'"{e}"' for e in entries) if entries else '"<the host it needs>"'
    return {
        **failure,
        "toml": f"[network]\negress = [{listed}]",
        "outside": [d["entry"] for d in failure["destinations"] if not d["in_ceiling"]],
        "toml_url": page_url(workspace, path="workspace.toml"),
        "members_url": reverse("members", args=[workspace.team.slug]),
    }


def setup_section(run: Run) -> dict[str, Any] | None:
    """The `[setup]` step in words: skipped on a cache hit, ran and filled a cache,
    failed, or not (yet) reached."""
    setup = run.setup
    if not setup.get("command"):
        return None
    hit, key = setup.get("hit"), setup.get("key") or ""
    if hit is True:
        outcome, text = "hit", "skipped — dependency cache hit"
    elif run.reason in ("setup_failed", "setup_oom"):
        outcome, text = "failed", "failed — the command did not run and no cache was kept"
    elif hit is False and run.setup_done_at:
        outcome, text = "filled", "ran — filled a new cache"
    elif hit is False and run.is_active:
        outcome, text = "running", "running — no cache had this key yet"
    elif hit is False:
        outcome, text = "failed", "did not finish — no cache was kept"
    elif run.is_active:
        outcome, text = (
            "pending",
            "not decided yet — the cache is looked up when the sandbox is created",
        )
    else:
        outcome, text = "not_reached", "not reached — the run ended before its sandbox existed"
    return {
        "command": setup["command"],
        "cache_key": setup.get("cache_key") or [],
        "key": key,
        "key_short": key[:12],
        "outcome": outcome,
        "text": text,
    }


def split_patches(diff: str) -> list[dict[str, Any]]:
    """The run's unified diff (every file's patch, one after the other) as one patch per
    file. Hunks are consumed by their line counts, so a removed line that reads
    "-- x" is never taken for the next file's "--- a/…" header."""
    files: list[dict[str, Any]] = []
    lines = diff.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            files.append(
                {
                    "old": _side(line[4:], "a/"),
                    "new": _side(lines[i + 1][4:], "b/"),
                    "lines": [line, lines[i + 1]],
                }
            )
            i += 2
            continue
        if not files:
            i += 1
            continue
        patch = files[-1]["lines"]
        patch.append(line)
        i += 1
        if m := HUNK.match(line):
            old_left = int(m[1]) if m[1] is not None else 1
            new_left = int(m[2]) if m[2] is not None else 1
            while (old_left > 0 or new_left > 0) and i < len(lines):
                body = lines[i]
                old_left -= body[:1] != "+"
                new_left -= body[:1] != "-"
                patch.append(body)
                i += 1
    for f in files:
        f["path"] = f["new"] or f["old"]
        f["status"] = (
            "added"
            if f["old"] is None
            else "deleted"
            if f["new"] is None
            else "renamed"
            if f["old"] != f["new"]
            else "modified"
        )
        f["rows"] = diff_lines("\n".join(f.pop("lines")))
        f["additions"] = sum(1 for r in f["rows"] if r[0] == "add")
        f["deletions"] = sum(1 for r in f["rows"] if r[0] == "del")
    return files


def _side(header: str, prefix: str) -> str | None:
    name = header.rstrip("\n")
    if name == "/dev/null":
        return None
    return name.removeprefix(prefix)


def changes_section(run: Run) -> dict[str, Any] | None:
    """The files the run changed, with their diff; None until they are read back."""
    changes = run.changes
    if changes is None:
        return None
    groups = [
        ("added", "Added", changes.get("added") or []),
        ("modified", "Modified", changes.get("modified") or []),
        ("deleted", "Deleted", changes.get("deleted") or []),
        ("renamed", "Renamed", [f"{r['from']} → {r['to']}" for r in changes.get("renamed") or []]),
    ]
    skipped = changes.get("skipped") or []
    return {
        "stats": changes.get("stats") or {"files": 0, "additions": 0, "deletions": 0},
        "groups": [
            {"kind": k, "label": label, "paths": paths} for k, label, paths in groups if paths
        ],
        "binary": changes.get("binary") or [],
        "files": split_patches(changes.get("diff") or ""),
        "truncated": bool(changes.get("truncated")),
        "skipped": skipped,
        "skipped_more": max(0, int(changes.get("skipped_count") or 0) - len(skipped)),
        "error": changes.get("error") or "",
        "withheld": changes.get("withheld") or [],
        "commit": run.changes_commit,
        "branch": run.changes_branch,
        "can_commit": bool(changes.get("tree")) and not run.changes_commit,
    }


def artifacts_section(run: Run, workspace: Workspace) -> dict[str, Any]:
    args = [workspace.team.slug, workspace.slug, run.public_id]
    kept = [
        {
            **a,
            "sha_short": a["sha256"][:12],
            "url": reverse("workspace-run-artifact", args=[*args, a["path"]]),
        }
        for a in run.artifacts
    ]
    return {
        "kept": kept,
        "refused": run.artifacts_refused,
        "paths": run.artifact_paths,
        "expired_at": run.outputs_expired_at,
    }


def comparison_section(run: Run, workspace: Workspace) -> dict[str, Any] | None:
    """Beside the run it replays; on an original, beside its latest re-run."""
    if run.rerun_of_id:
        other, relation = run.rerun_of, "the run this one replays"
    else:
        other = run.reruns.order_by("-queued_at", "-id").first()
        relation = "its latest re-run"
    if other is None:
        return None
    url = reverse("workspace-run", args=[workspace.team.slug, workspace.slug, other.public_id])
    return {"other": other, "relation": relation, "url": url, "rows": compare_runs(run, other)}
