"""Reading a run's kept artifacts back: only the files it listed, never a path a
request makes up (the listing on the run is the allowlist)."""

import os
from typing import BinaryIO

from core.errors import NotFound
from runs.models import Run
from runs.outputs import artifacts_dir


def open_artifact(run: Run, path: str) -> BinaryIO:
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
        fd = os.open(artifacts_dir(run.public_id) / path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise NotFound(
            f"The artifact {path!r} is gone from storage.",
            {"path": path},
            code="artifact_not_found",
        ) from None
    return os.fdopen(fd, "rb")
