"""What a `git push` may change: checked per ref before dulwich moves it.

Pushed trees pass the same path rules as the file API (no `.git`, no `..`, no control
characters, UTF-8 names, depth and length caps) and the same file size cap; the
default branch can be neither deleted nor force-pushed unless the workspace allows it.
"""

from django.conf import settings
from dulwich.graph import can_fast_forward
from dulwich.objects import Commit, Tree
from dulwich.repo import Repo

from config.errors import Invalid
from workspaces.gitstore import MODE_LINK, MODE_SUBMODULE, MODE_TREE, ZERO_SHA, check_branch_name
from workspaces.paths import MAX_DEPTH, MAX_PATH_BYTES, check_entry_name


class PushRefused(Exception):
    pass


class PushCheck:
    def __init__(self, repo: Repo, default_branch: str, allow_force_push: bool) -> None:
        self.repo = repo
        self.default_ref = b"refs/heads/" + default_branch.encode()
        self.allow_force_push = allow_force_push
        self.seen_trees: set[bytes] = set()

    def check(self, ref: bytes, old: bytes, new: bytes) -> bytes | None:
        """None if the update may go ahead, else the reason git shows the pusher."""
        try:
            self._check(ref, old, new)
        except (PushRefused, Invalid) as e:
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
        if (ref == self.default_ref and old != ZERO_SHA and not self.allow_force_push
                and not can_fast_forward(self.repo, old, new)):
            raise PushRefused("force-pushes to the default branch are refused; pull, merge "
                              "and push again (an admin can allow them in settings)")
        known = [sha for sha in self.repo.get_refs().values() if sha in self.repo]
        for entry in self.repo.get_walker(include=[new], exclude=known):
            self._check_tree(entry.commit.tree, "", 0)

    def _check_tree(self, tree_sha: bytes, prefix: str, depth: int) -> None:
        if tree_sha in self.seen_trees:
            return
        tree = self.repo[tree_sha]
        if not isinstance(tree, Tree):
            raise PushRefused("a commit points at something that is not a tree")
        for entry in tree.iteritems():
            try:
                name = entry.path.decode("utf-8")
            except UnicodeDecodeError:
                raise PushRefused(f"a name in {prefix or '/'} is not UTF-8") from None
            path = f"{prefix}{name}"
            check_entry_name(name, path=path)
            if len(path.encode()) > MAX_PATH_BYTES or depth + 1 > MAX_DEPTH:
                raise PushRefused(f"{path[:80]}…: path too long or too deep")
            if entry.mode == MODE_TREE:
                self._check_tree(entry.sha, path + "/", depth + 1)
            elif entry.mode not in (MODE_LINK, MODE_SUBMODULE):
                size = len(self.repo.object_store.get_raw(entry.sha)[1])
                if size > settings.WORKSPACE_MAX_FILE_BYTES:
                    limit = settings.WORKSPACE_MAX_FILE_BYTES // (1024 * 1024)
                    raise PushRefused(f"{path} is larger than {limit} MB")
        self.seen_trees.add(tree_sha)
