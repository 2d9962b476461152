"""What other apps may follow of workspaces without workspaces knowing them."""

import logging

from django.dispatch import Signal

# Sent after the commit that moved a branch (a commit from Berth, or a push):
# kwargs workspace, branch, sha, actor.
branch_moved = Signal()


def announce_branch_moved(workspace: object, branch: str, sha: str, actor: object) -> None:
    """Send `branch_moved`; a receiver's failure is logged, never allowed to fail the
    commit or the push that already happened."""
    for receiver, result in branch_moved.send_robust(
        type(workspace), workspace=workspace, branch=branch, sha=sha, actor=actor
    ):
        if isinstance(result, Exception):
            logging.getLogger(__name__).error(
                "%s failed after %s moved: %r", receiver, branch, result
            )
