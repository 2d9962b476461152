"""What other apps may follow of workspaces without workspaces knowing them."""

import logging
from dataclasses import dataclass, field

from django.dispatch import Signal

# Sent after the commit that moved a branch (a commit from Berth, or a push):
# kwargs workspace, branch, sha, actor. A receiver may answer with a list of Followers:
# what follows the branch (a session) and whether it has the new commit yet.
branch_moved = Signal()
# Sent before a workspace and its rows are deleted: kwargs workspace. What runs in the
# engine for it (sandboxes, with their containers and volumes) is stopped and removed
# by the apps that made it, while they can still find it from the workspace's rows.
workspace_deleting = Signal()


@dataclass(frozen=True)
class Follower:
    """One thing that follows a branch, as its receiver reports it after a write: the
    write's answer shows it (a session: applied, conflict, frozen: applied on resume)."""

    kind: str
    id: str
    state: str
    message: str
    conflicts: list[dict[str, str]] = field(default_factory=list)  # [{path, why}]
    url: str = ""  # its page's path (a push's remote: line and an answer link it absolute)


def announce_branch_moved(
    workspace: object, branch: str, sha: str, actor: object
) -> list[Follower]:
    """Send `branch_moved` and gather what its receivers report; a receiver's failure is
    logged, never allowed to fail the commit or the push that already happened."""
    reports: list[Follower] = []
    for receiver, result in branch_moved.send_robust(
        type(workspace), workspace=workspace, branch=branch, sha=sha, actor=actor
    ):
        if isinstance(result, Exception):
            logging.getLogger(__name__).error(
                "%s failed after %s moved: %r", receiver, branch, result
            )
        elif isinstance(result, list):
            reports.extend(r for r in result if isinstance(r, Follower))
    return reports


# Sent after the commit that made approvals lapse (superseded by a reviewer's narrower
# contract, or revoked): kwargs workspace, review_ids (ContractReview pks), who (a
# label). Runs, sessions, previews and releases under one that today's approvals no
# longer admit are stopped by their apps' receivers.
contract_lapsed = Signal()


def announce_workspace_deleting(workspace: object) -> None:
    """Send `workspace_deleting`; a receiver's failure (the engine down) is logged and
    does not keep the workspace: the runner agent's reconcile removes a sandbox whose
    owner is gone."""
    for receiver, result in workspace_deleting.send_robust(type(workspace), workspace=workspace):
        if isinstance(result, Exception):
            logging.getLogger(__name__).error(
                "%s failed before %s was deleted: %r", receiver, workspace, result
            )
