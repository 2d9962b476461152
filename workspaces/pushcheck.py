"""What a `git push` may change: checked per ref before dulwich moves it.

Pushed trees pass the same path rules as the file API (no `.git`, no `..`, no control
or invisible characters, UTF-8 names, depth and length caps), the same file size cap
and the same caps on what a tree expands to (workspaces.treesize); the
default branch can be neither deleted nor force-pushed unless the workspace allows it.
"""

from dulwich.graph import can_fast_forward
from dulwich.objects import Commit
from dulwich.repo import Repo

from core.errors import BerthError
from workspaces.gitstore import ZERO_SHA, check_branch_name
from workspaces.treesize import check_tree


class PushRefused(Exception):
    pass


class PushCheck:
    def __init__(self, repo: Repo, default_branch: str, allow_force_push: bool) -> None:
        self.repo = repo
        self.default_ref = b"refs/heads/" + default_branch.encode()
        self.allow_force_push = allow_force_push

    def check(self, ref: bytes, old: bytes, new: bytes) -> bytes | None:
        """None if the update may go ahead, else the reason git shows the pusher."""
        try:
            self._check(ref, old, new)
        except (PushRefused, BerthError) as e:
            return str(getattr(e, "message", e)).encode()
        return None

    def _check(self, ref: bytes, old: bytes, new: bytes) -> None:
        if ref.startswith(b"refs/heads/"):
            check_branch_name(ref.removeprefix(b"refs/heads/").decode("utf-8", "replace"))
        elif not ref.startswith(b"refs/tags/"):
            raise PushRefused("only branches and tags may be pushed")
        if new == ZERO_SHA:
            if ref == self.default_ref:
                raise PushRefused("the default branch cannot be deleted")
            return
        commit = self.repo[new]
        if ref.startswith(b"refs/heads/") and not isinstance(commit, Commit):
            raise PushRefused("a branch must point at a commit")
        if (
            ref == self.default_ref
            and old != ZERO_SHA
            and not self.allow_force_push
            and not can_fast_forward(self.repo, old, new)
        ):
            raise PushRefused(
                "force-pushes to the default branch are refused; pull, merge "
                "and push again (an admin can allow them in settings)"
            )
        known = [sha for sha in self.repo.get_refs().values() if sha in self.repo]
        for entry in self.repo.get_walker(include=[new], exclude=known):
            # Measured with multiplicity (memoised per tree id): the same names, depth,
            # length and size rules as the file API, and the tree caps.
            check_tree(self.repo.object_store, entry.commit.tree)
