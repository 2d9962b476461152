"""Opening a workspace's repository, and who its commits are by."""

from collections.abc import Iterator
from contextlib import contextmanager

from accounts.access import Actor
from workspaces.gitstore import Author, GitStore
from workspaces.models import PinnedCommit, Workspace


@contextmanager
def open_store(workspace: Workspace) -> Iterator[GitStore]:
    def pinned(sha: str) -> bool:
        return PinnedCommit.objects.filter(workspace=workspace, sha=sha).exists()

    store = GitStore(workspace.repo_path, pinned)
    try:
        yield store
    finally:
        store.close()


def pin_commit(workspace: Workspace, sha: str) -> None:
    """Keep `sha` usable for as long as the record that names it (see PinnedCommit)."""
    PinnedCommit.objects.bulk_create(
        [PinnedCommit(workspace=workspace, sha=sha)], ignore_conflicts=True
    )


def author_of(actor: Actor) -> Author:
    """A person commits as themselves; an agent as its token's name, on behalf of the
    token's user, so history says both."""
    user = actor.user
    email = user.email or f"{user.username}@users.berth.invalid"
    if actor.token is not None:
        return Author(f"{actor.token.name} (token of {user.username})", email)
    return Author(user.get_full_name() or user.username, email)
