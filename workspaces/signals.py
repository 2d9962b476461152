"""What other apps may follow of workspaces without workspaces knowing them."""

from django.dispatch import Signal

# Sent after the commit that moved a branch (a commit from Berth, or a push):
# kwargs workspace, branch, sha, actor.
branch_moved = Signal()
