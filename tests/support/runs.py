"""Runs as the tests drive them: an agent through the API, rows made for the pages, and
what a run gives back."""

import base64
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import User
from django.utils import timezone

from accounts import actions as account_actions
from accounts.access import Actor
from accounts.models import Role
from runs import actions as run_actions
from runs.models import TERMINAL_STATES, Run, RunState
from sandbox.engine import engine
from tests.support.api import bearer
from tests.support.servers import ROOT, wait_for
from workspaces import actions as workspace_actions
from workspaces import contract, reviews
from workspaces.changes import Change
from workspaces.models import ContractReview, Workspace
from workspaces.store import open_store

TERMINAL = {"succeeded", "failed", "timed_out", "cancelled", "oom_killed", "error", "lost"}


class Agent:
    """An API client acting as carol's agent."""

    def __init__(self, client, secret: str) -> None:
        self.client, self.headers = client, bearer(secret)

    def run(self, command: str, **body) -> dict:
        r = self.client.post(
            "/api/v1/workspaces/shop/runs",
            {"command": command, **body},
            content_type="application/json",
            **self.headers,
        )
        assert r.status_code == 202, r.content
        return r.json()

    def get(self, path: str):
        return self.client.get(f"/api/v1{path}", **self.headers)

    def wait(self, run: dict, timeout: float = 120) -> dict:
        return wait_for(
            lambda: self.get(f"/runs/{run['id']}").json(),
            timeout,
            interval=0.1,
            what=f"run {run['id']} to end",
            until=lambda current: current["state"] in TERMINAL,
        )

    def log(self, run: dict, timeout: float = 300) -> list[dict]:
        entries, after = [], 0

        def read() -> bool:
            """Every page there is now; True once the log is complete."""
            nonlocal after
            while True:
                page = self.get(f"/runs/{run['id']}/logs?after={after}&limit=5000").json()
                entries.extend(page["entries"])
                after = page["next"]
                if page["complete"] or not page["entries"]:
                    return page["complete"]

        wait_for(read, timeout, what=f"run {run['id']}'s complete log")
        return entries

    def output(self, run: dict) -> list[str]:
        return [e["text"] for e in self.log(run) if e["stream"] != "system"]


def set_toml(shop, cast, text: str) -> None:
    """The workspace's contract as its team's admin writes it, then approved by another
    reviewer (approve_contract), so the agent's runs may use it: a write approves
    nothing by itself (workspaces.reviews)."""
    admin = cast.charlie if shop.team_id == cast.team_b.pk else cast.alice
    workspace_actions.commit_changes(
        shop, Actor(admin), [Change("write", "workspace.toml", text.encode())], "toml"
    )
    approve_contract(shop, cast, shop.default_branch)


def approve_contract(workspace, cast, ref: str) -> None:
    """What `ref` asks for, approved by a reviewer who did not ask for it, on its review,
    as on its page (team A: carol asks, bob approves; team B: charlie asks, dana, a
    reviewer made for it, approves)."""
    with open_store(workspace) as store:
        commit = store.resolve(ref)
    values = contract.asked(run_actions.load_config(workspace, commit))
    if workspace.team_id == cast.team_b.pk:
        asker = cast.charlie
        approver = (
            User.objects.filter(username="dana").first()
            or account_actions.create_user(cast.team_b, "dana", Role.REVIEWER, None)[0]
        )
    else:
        asker, approver = cast.carol, cast.bob
    try:
        reviews.admit(workspace, Actor(asker), values, commit=commit, ref=ref, asked_for="a run")
    except reviews.ContractHeld as e:
        review = ContractReview.objects.get(public_id=e.details["review"])
        reviews.approve(review, Actor(approver))


def no_container_left(run: dict, timeout: float = 20) -> bool:
    """True once every container and volume of the run is gone (the agent removes them at
    the end; its reconcile catches any a crash left behind), and its Sandbox rows say so.
    Found by the run's owner label, whatever the sandboxes are named; and the run must
    have had a sandbox, so a run that never made one cannot pass by having none."""
    from sandbox.models import Sandbox, SandboxState

    boxes = Sandbox.objects.filter(owner_kind="run", owner_id=run["id"])
    assert boxes.exists(), f"run {run['id']} never had a sandbox"
    owned = {"label": [f"berth.owner={run['id']}", "berth.kind=sandbox"]}
    return wait_for(
        lambda: (
            not engine().api.containers(all=True, filters=owned)
            and not engine().volumes.list(filters=owned)
            and not boxes.exclude(state=SandboxState.REMOVED).exists()
        ),
        timeout,
        interval=0.1,
        what=f"run {run['id']}'s containers and volumes to be removed",
    )


def wait_for_output(agent, run, text: str, timeout: float = 60) -> bool:
    """True once a log line equal to `text` is readable through the API."""

    def shown() -> bool:
        entries = agent.get(f"/runs/{run['id']}/logs?after=0").json()["entries"]
        return any(e["text"] == text for e in entries)

    return wait_for(shown, timeout, interval=0.1, what=f"{text!r} in run {run['id']}'s log")


RUNS = "/t/team-a/w/shop/runs/"
ISOLATION = {
    "runtime": "runsc",
    "user": "1000:1000",
    "cap_drop": ["ALL"],
    "cap_add": [],
    "privileged": False,
    "security_opt": ["no-new-privileges", "seccomp=berth-sandbox/runsc@sha256:0123456789ab"],
    "seccomp": {
        "profile": "berth-sandbox/runsc",
        "sha256": "0123456789ab" + "0" * 52,
        "enforced": True,
        "enforced_by": "runsc --oci-seccomp (inside gVisor)",
    },
    "read_only_root": True,
    "network": "none",
    "memory_bytes": 512 << 20,
    "nano_cpus": 1_000_000_000,
    "pids_limit": 256,
    "ulimits": {"nofile": 1024},
    "mounts": [{"target": "/workspace", "type": "volume"}],
    "init": True,
}


LIMITS = {
    "cpus": 1.0,
    "memory_mb": 512,
    "disk_mb": 1024,
    "timeout_s": 600,
    "pids": 256,
    "nofile": 1024,
    "log_bytes": 10_000_000,
}


def head(workspace: Workspace) -> str:
    with open_store(workspace) as store:
        sha = store.branch_head("main")
    assert sha
    return sha


def waiting_runs(workspace: Workspace, n: int, runtime: str = "runc") -> list[Run]:
    """`n` runs asked for and waiting for admission (`job 0`, `job 1`…)."""
    return [
        Run.objects.create(
            workspace=workspace,
            ref="main",
            commit="0" * 40,
            command=f"job {i}",
            image=settings.SANDBOX_IMAGE,
            runtime=runtime,
        )
        for i in range(n)
    ]


def make_run(workspace: Workspace, user, **fields) -> Run:
    fields = {
        "ref": "main",
        "commit": head(workspace),
        "command": "python3 -m unittest",
        "image": settings.SANDBOX_IMAGE,
        "limits": LIMITS,
        "requested_by": user,
        **fields,
    }
    return Run.objects.create(workspace=workspace, **fields)


def finished_run(workspace: Workspace, user, **fields) -> Run:
    t0 = timezone.now() - timedelta(seconds=30)
    steps = {
        "queued_at": t0,
        "started_at": t0 + timedelta(seconds=0.2),
        "hydrated_at": t0 + timedelta(seconds=1.5),
        "process_started_at": t0 + timedelta(seconds=1.7),
        "finished_at": t0 + timedelta(seconds=14),
    }
    return make_run(
        workspace,
        user,
        **{
            "state": RunState.FAILED,
            "reason": "exit_nonzero",
            "exit_code": 3,
            "message": "The command exited with code 3; the log says why.",
            "isolation": ISOLATION,
            "warnings": [
                "workspace.toml asks for [sandbox].cpus = 8; "
                "this server allows at most 2, so 2 applies."
            ],
            **steps,
            **fields,
        },
    )


DIFF = (
    "--- a/app.py\n+++ b/app.py\n@@ -1,3 +1,3 @@\n def greeting(name):\n"
    "-    return 'Hello'\n+    return 'Howdy'\n \n"
    # A removed line that reads like the next file's header must stay in this file.
    "--- a/notes.md\n+++ b/notes.md\n@@ -1 +1 @@\n--- a/looks-like-a-header\n"
    "+++ b/so-does-this\n"
    "--- /dev/null\n+++ b/dist/out.txt\n@@ -0,0 +1 @@\n+built <b>here</b>\n"
)


CHANGES = {
    "added": ["dist/out.txt"],
    "modified": ["app.py", "notes.md"],
    "deleted": ["README.md"],
    "renamed": [{"from": "old.txt", "to": "new.txt"}],
    "binary": ["logo.png"],
    "stats": {"files": 6, "additions": 3, "deletions": 2},
    "diff": DIFF,
    "truncated": False,
    "skipped": [{"path": "huge.iso", "why": "larger than 10 MB"}],
    "skipped_count": 3,
}


def wait_ended(run_id: str, timeout: float = 180) -> Run:
    return wait_for(
        lambda: Run.objects.filter(public_id=run_id, state__in=TERMINAL_STATES).first(),
        timeout=timeout,
        interval=0.1,
        what=f"run {run_id} to end",
    )


def with_artifacts_toml(shop, cast) -> None:
    toml = (
        ROOT / "workspaces/starters/python-http/workspace.toml"
    ).read_text() + '\n[artifacts]\npaths = ["dist/"]\n'
    workspace_actions.commit_changes(
        shop, Actor(cast.alice), [Change("write", "workspace.toml", toml.encode())], "keep"
    )


def engine_output(container) -> bytes:
    """What the engine kept of a run's output, its output wrapper's frames undone
    (sandbox/in_image/berth_run.py): the command's bytes, stdout and stderr together."""
    out = []
    for line in container.logs().splitlines():
        if line[:1] == b"\x1e" and line[2:3] == b" ":
            out.append(base64.b64decode(line[3:]))
        else:
            out.append(line + b"\n")
    return b"".join(out)
