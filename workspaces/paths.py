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


class LinkOutsideTree(InvalidPath):
    code = "link_outside_tree"


def link_reach(target: bytes | str) -> int:
    """How many folders above its own a symlink's target climbs, read as the engine
    reads it (lexically, each `..` one level up, never following a link): 0 for an
    absolute target (the engine keeps it inside the sandbox) or one that stays below.
    The deepest point counts, not where it ends: `../x/y` is outside whatever `x` is."""
    text = target.decode("utf-8", "surrogateescape") if isinstance(target, bytes) else target
    if text.startswith("/"):
        return 0
    level = highest = 0
    for part in text.split("/"):
        if part == "..":
            level -= 1
            highest = min(highest, level)
        elif part not in ("", "."):
            level += 1
    return -highest


def link_climbs_out(path: str, target: bytes | str) -> bool:
    """A symlink at `path` (relative to the tree's root) whose target names a place
    above the root: Docker refuses the whole archive for one such link."""
    return link_reach(target) > path.count("/")


def link_outside(path: str, target: bytes | str) -> LinkOutsideTree:
    shown = target.decode("utf-8", "replace") if isinstance(target, bytes) else target
    return LinkOutsideTree(
        f"{path} is a symlink to {shown!r}, which climbs out of the workspace: no sandbox "
        "can hold it, so no run, session or build of the commit could start. Point it "
        "inside the workspace (a relative target that stays below its root) or at an "
        "absolute path, or remove it.",
        {"path": path, "target": shown},
    )
