"""Files dropped onto the file tree (or picked with its Upload button): one commit for
the whole batch, through the same write path and rules as the API's write_files.

1. The batch is a multipart body, refused past MAX_REQUEST_BODY before anything parses
   it (config.middleware); Django spools each file past FILE_UPLOAD_MAX_MEMORY_SIZE to
   disk, so memory holds at most the batch's cap however the body is shaped.
2. At most WORKSPACE_MAX_UPLOAD_FILES files; each path is the target folder joined with
   the name (or the relative path a dropped folder gives), through `clean_path`; each
   file's size is checked against the one file cap before it is read.
3. `commit_changes` from the commit the page showed: what the branch got since is kept,
   a file it changed meanwhile is a conflict, the tree caps hold.
Answers are JSON for the page's fetch: the commit and where to go, or the error object.
"""

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation, TooManyFilesSent
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.multipartparser import MultiPartParserError
from django.views.decorators.http import require_POST

from accounts.access import Actor
from accounts.models import Membership
from core.errors import BerthError, Invalid
from workspaces import actions
from workspaces.changes import Change
from workspaces.edits import SHA
from workspaces.models import Workspace
from workspaces.paths import clean_dir, clean_path
from workspaces.views import page_url, workspace_page


class TooManyFiles(Invalid):
    code = "too_many_files"


@require_POST
@workspace_page
def upload(request: HttpRequest, membership: Membership, workspace: Workspace) -> HttpResponse:
    try:
        changes, folder = read_batch(request)
        count = len(changes)
        where = folder or "the root folder"
        message = request.POST.get("message", "").strip() or (
            f"Upload {changes[0].path}" if count == 1 else f"Upload {count} files to {where}"
        )
        result = actions.commit_changes(
            workspace,
            Actor(membership.user),
            changes,
            message,
            request.POST["branch"],
            request.POST["base_commit"],
        )
    except BerthError as e:
        return JsonResponse(e.as_dict(), status=e.status)
    messages.success(request, f"{message}: commit {result.sha[:7]}.")
    return JsonResponse(
        {
            "commit": result.sha,
            "branch": result.branch,
            "files": result.files,
            "url": page_url(workspace, ref=result.branch, path=folder or None),
        }
    )


def read_batch(request: HttpRequest) -> tuple[list[Change], str]:
    """The batch's changes (step 2) and the folder they go into."""
    try:
        files = request.FILES.getlist("files")
        post = request.POST
    except TooManyFilesSent:
        raise too_many() from None
    except RequestDataTooBig:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        raise BerthError(
            "The upload's form fields are too large; send fewer or shorter paths.",
            {"limit_bytes": limit},
            code="too_large",
            status=413,
        ) from None
    except (MultiPartParserError, SuspiciousOperation):
        raise Invalid("The upload is not a valid multipart form.") from None
    if not isinstance(post.get("branch"), str) or not SHA.match(post.get("base_commit") or ""):
        raise Invalid("Send the branch and the 40-character base_commit the page showed.")
    if not files:
        raise Invalid("Drop at least one file.", {"field": "files"})
    if len(files) > settings.WORKSPACE_MAX_UPLOAD_FILES:
        raise too_many()
    folder = clean_dir(post.get("folder"))
    # A dropped folder's files carry their path below it; a plain file, its name.
    names = post.getlist("paths")
    if names and len(names) != len(files):
        raise Invalid("Give one path per file, or none.", {"field": "paths"})
    changes: list[Change] = []
    seen: set[str] = set()
    for i, upload in enumerate(files):
        name = names[i] if names else (upload.name or "")
        path = clean_path(f"{folder}/{name}" if folder else name)
        if path in seen:
            raise Invalid(f"{path!r} is in the upload twice.", {"path": path})
        seen.add(path)
        actions.check_file_size(upload.size or 0, path)
        changes.append(Change("write", path, upload.read()))
    return changes, folder


def too_many() -> TooManyFiles:
    limit = settings.WORKSPACE_MAX_UPLOAD_FILES
    return TooManyFiles(
        f"An upload holds at most {limit} files; upload the rest in another batch, or "
        "push them with git.",
        {"limit": limit},
    )
