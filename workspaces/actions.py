"""Every state change of workspaces: atomic where the database is involved, each
writing an Activity row. Git writes are serialised per repository by a file lock and
land with a compare-and-swap on the branch, so a concurrent writer is never lost."""

import base64
import binascii
import re
import shutil
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils.text import slugify

from accounts.access import Actor
from accounts.actions import record
from accounts.models import Team
from accounts.slugs import validate_slug
from core.errors import Conflict, Invalid, NotFound
from workspaces import config as workspace_config
from workspaces import contract_writes, merge, reviews, starters
from workspaces.changes import Change, TreeEditor
from workspaces.gitstore import GitStore, check_branch_name
from workspaces.models import Workspace
from workspaces.paths import clean_path
from workspaces.signals import Follower, announce_branch_moved, announce_workspace_deleting
from workspaces.store import author_of, open_store
from workspaces.treesize import FileTooLarge


@dataclass
class CommitResult:
    sha: str
    branch: str
    parent: str | None
    files: list[str]
    warnings: list[dict[str, Any]] = field(default_factory=list)
    # What follows the branch (sessions) and whether each has this commit, as the
    # branch_moved receivers reported it once the commit was made.
    followers: list[Follower] = field(default_factory=list)
    # Paths written from an older base whose content was merged with the branch's
    # changes since (workspaces.merge): what was committed is not what was sent.
    merged: list[str] = field(default_factory=list)


def create_workspace(
    team: Team, actor: Actor, name: str, slug: str | None = None, template: str | None = None
) -> Workspace:
    """A new workspace with one first commit: empty, or the files of a starter."""
    name = (name or "").strip()
    if not name or len(name) > 100:
        raise Invalid("A name of 1–100 characters is required.", {"field": "name"})
    slug = slug if slug is not None else slugify(name)[:30].strip("-")
    validate_slug(slug, "workspace slug", reserved=Workspace.RESERVED_SLUGS)
    if template and template not in starters.NAMES:
        raise Invalid(
            f"Unknown template {template!r}; use one of {', '.join(starters.NAMES)}.",
            {"field": "template", "allowed": list(starters.NAMES)},
        )
    workspace = Workspace(
        team=team, slug=slug, name=name, template=template or "", created_by=actor.user
    )
    try:
        with transaction.atomic():
            workspace.save()
            store = GitStore.init(workspace.repo_path, workspace.default_branch)
            try:
                editor = TreeEditor(store, None)
                for path, content in (starters.files(template) if template else {}).items():
                    editor.apply(Change("write", path, content))
                for path, target in starters.SYMLINKS.get(template or "", {}).items():
                    editor.apply(Change("symlink", path, target.encode()))
                message = (
                    f"Create workspace from the {template} template"
                    if template
                    else "Create workspace"
                )
                sha = store.make_commit(editor.write(), [], author_of(actor), message)
                store.advance(workspace.default_branch, None, sha)
            finally:
                store.close()
            first = starters.files(template).get(workspace_config.FILENAME) if template else None
            reviews.approve_initial(workspace, first.decode() if first else None)
            record(
                team,
                actor,
                "workspace.created",
                f"workspace:{slug}",
                slug,
                template=template or "",
                commit=sha,
            )
    except IntegrityError:
        raise Conflict(
            f"Team {team.slug} already has a workspace {slug!r}; choose another slug.",
            {"field": "slug"},
        ) from None
    except BaseException:
        shutil.rmtree(workspace.repo_path, ignore_errors=True)
        raise
    return workspace


def decode_content(content: str, encoding: str, path: str) -> bytes:
    if encoding == "base64":
        try:
            data = base64.b64decode(content, validate=True)
        except (binascii.Error, ValueError):
            raise Invalid(
                f"The content of {path!r} is not valid base64.",
                {"path": path},
                code="invalid_base64",
            ) from None
    elif encoding in ("utf-8", "text"):
        data = content.encode("utf-8")
    else:
        raise Invalid(f'Unknown encoding {encoding!r}; use "utf-8" or "base64".', {"path": path})
    check_file_size(len(data), path)
    return data


def check_file_size(size: int, path: str) -> None:
    """The one cap on a file written through Berth (API, MCP, editor, upload): 413
    `file_too_large`, said before its content is read where the door knows its size."""
    limit = settings.WORKSPACE_MAX_FILE_BYTES
    if size > limit:
        raise FileTooLarge(
            f"{path!r} is {size / (1024 * 1024):.1f} MB; files may be at "
            f"most {limit // (1024 * 1024)} MB. Keep large files out of the "
            "workspace.",
            {"path": path, "limit_bytes": limit, "size_bytes": size},
        )


def commit_changes(
    workspace: Workspace,
    actor: Actor,
    changes: list[Change],
    message: str,
    branch: str | None = None,
    base_commit: str | None = None,
    overwrite: str | None = None,
) -> CommitResult:
    """Apply every change as one commit on `branch`, or change nothing.

    1. Paths are validated; contents were decoded and size-checked by the caller.
    2. Under the repository's write lock, when the branch head has moved past
       `base_commit`, the changes are carried onto it (workspaces.merge): what the
       branch changed meanwhile is kept, text changes in separate places are merged,
       and an overlap is 409 `conflict` with what the write would undo of it
       (`overwrite`: the head whose overlaps the writer saw, and overwrites).
    3. The changes are applied to the head's tree in memory; only then are objects
       written and the branch advanced with a compare-and-swap.
    """
    branch = branch or workspace.default_branch
    if not changes:
        raise Invalid("Give at least one change.", {"field": "changes"})
    if base_commit and not re.fullmatch(r"[0-9a-f]{40}", base_commit):
        raise Invalid(
            "base_commit must be the 40-character SHA of the commit the change was made "
            "from (read_file's `commit`).",
            {"field": "base_commit"},
        )
    for change in changes:
        change.path = clean_path(change.path)
        if change.op == "rename":
            change.to = clean_path(change.to or "", what="to")
    with open_store(workspace) as store, store.write_lock():
        head = store.branch_head(branch)
        if head is None:
            raise NotFound(f"No branch {branch!r}.", {"branch": branch}, code="branch_not_found")
        merged = []
        if base_commit and base_commit != head:
            merged = merge.onto_head(store, changes, branch, base_commit, head, overwrite)
        editor = TreeEditor(store, store.commit(head).tree)
        for change in changes:
            editor.apply(change)
        tree = editor.write()
        if tree == store.commit(head).tree:
            raise Invalid(
                "These changes leave every file as it was; nothing to commit.", code="no_changes"
            )
        sha = store.make_commit(tree, [head], author_of(actor), message)
        store.advance(branch, head, sha)
        contract_writes.note(workspace, actor, store, [sha], [head])
    files = sorted({c.path for c in changes} | {c.to for c in changes if c.to})
    result = CommitResult(sha, branch, head, files, merged=merged)
    # A broken workspace.toml is committed (the source is the user's), but said at once.
    for change in changes:
        if change.op == "write" and change.path == workspace_config.FILENAME:
            text = (change.content or b"").decode("utf-8", "replace")
            try:
                workspace_config.parse(text)
            except workspace_config.ConfigError as e:
                result.warnings.append(e.as_dict()["error"])
    # No approval here: only what a person typed in the editor is theirs (edits.save,
    # workspaces.review_editor.written_on_page); a write through the API, MCP or another page
    # door is held when something asks for it.
    record(
        workspace.team,
        actor,
        "workspace.committed",
        f"commit:{sha[:12]}",
        workspace.slug,
        branch=branch,
        message=message.strip()[:200],
        files=files[:20],
    )
    # Outside a transaction this runs at once, so the answer carries the reports.
    transaction.on_commit(
        lambda: result.followers.extend(announce_branch_moved(workspace, branch, sha, actor))
    )
    return result


def create_branch(workspace: Workspace, actor: Actor, name: str, from_ref: str | None) -> str:
    check_branch_name(name)
    with open_store(workspace) as store, store.write_lock():
        sha = store.resolve(from_ref or workspace.default_branch)
        store.create_branch(name, sha)
    record(workspace.team, actor, "branch.created", f"branch:{name}", workspace.slug, commit=sha)
    return sha


def delete_branch(workspace: Workspace, actor: Actor, name: str) -> None:
    if name == workspace.default_branch:
        raise Conflict(f"{name!r} is the default branch and cannot be deleted.", {"branch": name})
    with open_store(workspace) as store, store.write_lock():
        store.delete_branch(name)
    record(workspace.team, actor, "branch.deleted", f"branch:{name}", workspace.slug)


def delete_workspace(workspace: Workspace, actor: Actor) -> None:
    """Remove the workspace and its repository; first, what runs for it in the engine
    (its sandboxes, their containers and volumes: workspaces.signals)."""
    path = workspace.repo_path
    announce_workspace_deleting(workspace)
    with transaction.atomic():
        record(
            workspace.team,
            actor,
            "workspace.deleted",
            f"workspace:{workspace.slug}",
            workspace.slug,
        )
        workspace.delete()
        transaction.on_commit(lambda: shutil.rmtree(path, ignore_errors=True))


def set_force_push_policy(workspace: Workspace, actor: Actor, allow: bool) -> Workspace:
    """Whether `git push --force` may rewrite the default branch (admins decide)."""
    with transaction.atomic():
        workspace.allow_force_push = allow
        workspace.save(update_fields=["allow_force_push"])
        record(
            workspace.team,
            actor,
            "workspace.policy_changed",
            f"workspace:{workspace.slug}",
            workspace.slug,
            allow_force_push=allow,
        )
    return workspace


def set_workspace_gvisor_policy(workspace: Workspace, actor: Actor, required: bool) -> Workspace:
    """Whether every run of this workspace uses gVisor, whatever workspace.toml or a
    request asks for (admins decide). Off does not lower a team-wide requirement."""
    with transaction.atomic():
        workspace.require_gvisor = required
        workspace.save(update_fields=["require_gvisor"])
        record(
            workspace.team,
            actor,
            "workspace.policy_changed",
            f"workspace:{workspace.slug}",
            workspace.slug,
            require_gvisor=required,
        )
    return workspace
