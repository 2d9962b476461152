"""The one place a path inside a workspace is validated (docs/security.md).

Every door (API, pages, MCP, git push checks) passes paths through `clean_path`, and
tree entry names through `check_entry_name`, before anything touches the repository.
"""

import unicodedata

from core.errors import Invalid

MAX_PATH_BYTES = 1024
MAX_DEPTH = 32
# Characters a reader cannot see: C1 controls (Cc past ASCII), format characters (Cf:
# the bidirectional overrides and isolates U+202A-202E and U+2066-2069, zero-width
# spaces and joiners, the BOM, soft hyphens) and line/paragraph separators. A U+202E in
# a file name makes a diff show a different name than the one stored, so a reviewer
# approving a deploy could be shown a misleading path.
_INVISIBLE = frozenset({"Cc", "Cf", "Zl", "Zp"})


class InvalidPath(Invalid):
    code = "invalid_path"


def clean_path(raw: str | bytes, *, what: str = "path") -> str:
    """A normalised, safe relative path ("src/app.py"), or InvalidPath saying why.

    Rejected: empty, absolute, `.`/`..` or empty components, `.git` as any component
    (any case), NUL and control characters, invisible and text-direction characters,
    backslashes, over 1024 bytes or 32 levels,
    non-UTF-8 names. Unicode is normalised to NFC so one name has one spelling.
    """
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidPath(f"The {what} is not valid UTF-8.", {"field": what}) from None
    if not isinstance(raw, str):
        raise InvalidPath(f"The {what} must be a string.", {"field": what})
    path = unicodedata.normalize("NFC", raw)
    if not path:
        raise InvalidPath(f"The {what} is empty.", {"field": what})
    if path.startswith("/"):
        raise InvalidPath(
            f"The {what} {path!r} is absolute; give it relative to the workspace root.",
            {"field": what},
        )
    if "\\" in path:
        raise InvalidPath(
            f"The {what} {path!r} contains a backslash; separate folders with /.", {"field": what}
        )
    if len(path.encode()) > MAX_PATH_BYTES:
        raise InvalidPath(
            f"The {what} is longer than {MAX_PATH_BYTES} bytes.",
            {"field": what, "maximum": MAX_PATH_BYTES},
        )
    parts = path.split("/")
    if len(parts) > MAX_DEPTH:
        raise InvalidPath(
            f"The {what} is more than {MAX_DEPTH} folders deep.",
            {"field": what, "maximum": MAX_DEPTH},
        )
    for part in parts:
        check_entry_name(part, what=what, path=path)
    return path


def check_entry_name(name: str, *, what: str = "path", path: str = "") -> None:
    """One component of a path (a tree entry's name)."""
    shown = path or name
    if name in ("", ".", ".."):
        raise InvalidPath(
            f"The {what} {shown!r} has an empty, `.` or `..` component.", {"field": what}
        )
    if name.casefold() == ".git":
        raise InvalidPath(
            f"The {what} {shown!r} has a `.git` component; Berth never stores one.", {"field": what}
        )
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise InvalidPath(f"The {what} {shown!r} contains a control character.", {"field": what})
    hidden = next((c for c in name if unicodedata.category(c) in _INVISIBLE), None)
    if hidden is not None:
        raise InvalidPath(
            f"The {what} {shown!r} contains the invisible character U+{ord(hidden):04X} "
            f"({unicodedata.name(hidden, 'unnamed')}); rename it without invisible or "
            "text-direction characters.",
            {"field": what, "character": f"U+{ord(hidden):04X}"},
        )
    if "/" in name or "\\" in name:
        raise InvalidPath(f"The name {name!r} contains a path separator.", {"field": what})


def clean_dir(raw: str | None) -> str:
    """A folder to list: "" (the root) or a clean path."""
    if raw is None or raw.strip("/") == "":
        return ""
    return clean_path(raw.strip("/"))
