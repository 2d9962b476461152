"""A run's kept artifacts, in Django's storage API (STORAGES["artifacts"]): a folder of
DATA_DIR by default, any backend an operator names (django-storages' S3 and the like)
otherwise, so the web host serves them from wherever they are kept. Read back only the
files a run listed, never a path a request makes up (the listing on the run is the
allowlist)."""

import contextlib
import os
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.core.files import File
from django.core.files.storage import FileSystemStorage, Storage, storages

from core.errors import NotFound
from runs.models import Run

ALIAS = "artifacts"


class DataDirStorage(FileSystemStorage):
    """DATA_DIR/artifacts, read where it is used rather than once (a process's DATA_DIR
    is its settings'); files 0600 in folders 0700, as everything Berth writes there."""

    def __init__(self, **options: Any) -> None:
        options.setdefault("file_permissions_mode", 0o600)
        options.setdefault("directory_permissions_mode", 0o700)
        options.setdefault("allow_overwrite", True)  # a finalize run again starts over
        self.given = options.pop("location", None)
        super().__init__(**options)

    @property
    def base_location(self) -> str:
        return str(self.given or Path(settings.DATA_DIR) / "artifacts")

    @property
    def location(self) -> str:
        return os.path.abspath(self.base_location)


def storage() -> Storage:
    return storages[ALIAS]


def folder_of(run_public_id: str) -> str:
    if not (run_public_id.isascii() and run_public_id.isalnum()):
        raise ValueError(f"not a run id: {run_public_id!r}")  # it becomes a name
    return f"{run_public_id[:2]}/{run_public_id}"


def keep(run_public_id: str, path: str, content: IO[bytes]) -> None:
    """One artifact (`path`: a clean relative path, runs.outputs) saved under its name."""
    name = f"{folder_of(run_public_id)}/{path}"
    saved = storage().save(name, File(content, name=os.path.basename(path)))
    if saved != name:  # a backend that renamed it rather than overwrite: never served
        storage().delete(saved)
        raise RuntimeError(f"the artifact store kept {path!r} under another name")


def remove_all(run_public_id: str) -> None:
    """Every file kept for the run, listed from the store itself (an earlier read of its
    outputs may have kept files its final listing does not name), then its folders."""
    store = storage()
    folders: list[str] = []

    def walk(folder: str) -> None:
        try:
            subfolders, files = store.listdir(folder)
        except FileNotFoundError:
            return
        for name in files:
            store.delete(f"{folder}/{name}")
        for sub in subfolders:
            walk(f"{folder}/{sub}")
        folders.append(folder)

    walk(folder_of(run_public_id))
    for folder in folders:  # the deepest first
        with contextlib.suppress(OSError):
            store.delete(folder)


def open_artifact(run: Run, path: str) -> IO[bytes]:
    if run.outputs_expired_at:
        raise NotFound(
            "This run's artifacts were removed by the retention setting.",
            {"path": path},
            code="artifact_expired",
        )
    listed = {a["path"] for a in run.artifacts}
    if path not in listed:
        raise NotFound(
            f"The run kept no artifact {path!r}.", {"path": path}, code="artifact_not_found"
        )
    try:
        opened: IO[bytes] = storage().open(f"{folder_of(run.public_id)}/{path}", "rb")
    except FileNotFoundError:
        raise NotFound(
            f"The artifact {path!r} is gone from storage.",
            {"path": path},
            code="artifact_not_found",
        ) from None
    return opened
