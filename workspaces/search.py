"""Search across the files of one commit, on the server, read from the object store.

There is no work tree: blobs are read from the repository's objects (dulwich), so
nothing a tenant stored can make the host follow a link, run a filter or a hook, or
read outside the repository. A link is an entry whose content is its target and is not
searched; a submodule is a commit id. Every door (API, MCP, the workspace page) calls
`search` and renders what it returns.

Whatever a tenant sends, one search is bounded (settings, SEARCH_*):
- the query's length, and a path glob's;
- the tree: measured against the commit caps first (treesize), so one blob held at a
  time is at most WORKSPACE_MAX_FILE_MB, and the walk at most the tree's entries;
- each file: past SEARCH_MAX_FILE_BYTES, or binary (a NUL in its first 8,000 bytes,
  Git's rule), it is skipped and named as skipped;
- the answer: at most `limit` lines (≤ SEARCH_MAX_MATCHES), one per matching line;
- the work: SEARCH_MAX_SCAN_BYTES read and SEARCH_TIME_S of wall time, regex matching
  included. A regex runs on the `regex` package with a timeout (Python's `re` has none,
  and `(a|aa)+$` backtracks for ever on a short line), releasing the GIL while it
  matches, so a slow pattern costs its own request's time and nobody else's.
A search stopped by a bound answers what it found so far, with `truncated` and why.
"""

import time
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import regex
from django.conf import settings

from core.errors import Invalid
from workspaces.gitstore import MODE_LINK, MODE_SUBMODULE, GitStore
from workspaces.treesize import check_tree

Case = Literal["smart", "sensitive", "insensitive"]
CASES = ("smart", "sensitive", "insensitive")
MAX_GLOB_CHARS = 256
MAX_GLOBS = 10
MAX_SKIPPED_LISTED = 50
SNIPPET_BEFORE = 80  # characters of a long line shown before a match
SNIPPET_CHARS = 300
BINARY_PROBE = 8000


@dataclass(frozen=True)
class Query:
    text: str
    regex: bool = False
    case: Case = "smart"
    paths: str | None = None  # globs, comma-separated
    limit: int | None = None


@dataclass
class Found:
    matches: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    skipped_count: int = 0
    files_scanned: int = 0
    files_matched: int = 0
    bytes_scanned: int = 0
    stopped: str | None = None


def limits() -> dict[str, Any]:
    return {
        "max_query_chars": settings.SEARCH_MAX_QUERY_CHARS,
        "max_file_bytes": settings.SEARCH_MAX_FILE_BYTES,
        "max_matches": settings.SEARCH_MAX_MATCHES,
        "max_scan_bytes": settings.SEARCH_MAX_SCAN_BYTES,
        "time_s": settings.SEARCH_TIME_S,
    }


def compile_query(q: Query) -> tuple[Any, Callable[[str, float], bool], int]:
    """The pattern, the path filter and the line limit, or Invalid with a stable code:
    `empty_query`, `query_too_long`, `invalid_regex`, `invalid_glob`, `invalid_case`,
    `below_minimum` / `above_maximum` (limit)."""
    text = q.text or ""
    if not text.strip():
        raise Invalid("Give something to search for.", {"field": "q"}, code="empty_query")
    most = settings.SEARCH_MAX_QUERY_CHARS
    if len(text) > most:
        raise Invalid(
            f"The query is longer than {most} characters.",
            {"field": "q", "maximum": most},
            code="query_too_long",
        )
    if q.case not in CASES:
        raise Invalid(
            f"case must be one of {', '.join(CASES)}.", {"field": "case"}, code="invalid_case"
        )
    top = settings.SEARCH_MAX_MATCHES
    limit = top if q.limit is None else q.limit
    if limit < 1:
        raise Invalid(
            "limit must be at least 1.", {"field": "limit", "minimum": 1}, code="below_minimum"
        )
    if limit > top:
        raise Invalid(
            f"limit must be at most {top}.",
            {"field": "limit", "maximum": top},
            code="above_maximum",
        )
    insensitive = q.case == "insensitive" or (q.case == "smart" and text == text.lower())
    flags = regex.MULTILINE | (regex.IGNORECASE if insensitive else 0)
    source = text if q.regex else regex.escape(text)
    try:
        # Compiling is bounded by the query's length; only matching can run away.
        pattern = regex.compile(source, flags)
    except (regex.error, OverflowError, RecursionError) as e:
        raise Invalid(
            f"The regular expression is not valid: {e}.",
            {"field": "q", "reason": str(e)},
            code="invalid_regex",
        ) from None
    return pattern, path_filter(q.paths), limit


def path_filter(globs: str | None) -> Callable[[str, float], bool]:
    """A test of a path against comma-separated globs: `*` and `?` stay within a folder,
    `**` crosses folders, a glob without `/` matches a name at any depth (`*.py`), one
    ending in `/` everything below that folder (`src/`)."""
    if globs is None or not globs.strip():
        return lambda path, deadline: True
    if len(globs) > MAX_GLOB_CHARS:
        raise Invalid(
            f"The path filter is longer than {MAX_GLOB_CHARS} characters.",
            {"field": "paths", "maximum": MAX_GLOB_CHARS},
            code="invalid_glob",
        )
    parts = [g.strip() for g in globs.split(",") if g.strip()]
    if len(parts) > MAX_GLOBS:
        raise Invalid(
            f"Give at most {MAX_GLOBS} path globs.",
            {"field": "paths", "maximum": MAX_GLOBS},
            code="invalid_glob",
        )
    for g in parts:
        if g.startswith("/") or "\\" in g or any(unicodedata.category(c) == "Cc" for c in g):
            raise Invalid(
                f"The path glob {g!r} must be relative to the workspace root, with / "
                "between folders.",
                {"field": "paths", "glob": g},
                code="invalid_glob",
            )
    pattern = regex.compile("|".join(f"(?:{_translate(g)})" for g in parts))

    def test(path: str, deadline: float) -> bool:
        # A glob of many stars backtracks too: bounded by the same clock.
        left = max(0.001, deadline - time.monotonic())
        return pattern.fullmatch(path, timeout=left, concurrent=True) is not None

    return test


def _translate(glob: str) -> str:
    if glob.endswith("/"):
        glob += "**"
    if "/" not in glob:
        glob = "**/" + glob
    out, i = [], 0
    while i < len(glob):
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif glob[i] == "*":
            out.append("[^/]*")
            i += 1
        elif glob[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(regex.escape(glob[i]))
            i += 1
    return "".join(out)


def search(store: GitStore, commit: str, q: Query) -> dict[str, Any]:
    """The lines of the commit's files that match, each once, in tree order.

    1. Check the query (compile_query) and measure the tree against the commit caps.
    2. Walk the tree's entries as objects; skip links, submodules and paths the glob
       leaves out (no blob is read for them).
    3. Read each blob once (a blob named at many paths is judged once); skip and name
       one past the file bound or binary.
    4. Decode it (invalid UTF-8 replaced: a Latin-1 file is text) and find matching
       lines with the deadline's remaining time; one result per line.
    5. Stop at the line limit, the scan bound or the deadline, saying which.
    """
    pattern, wanted, limit = compile_query(q)
    started = time.monotonic()
    deadline = started + settings.SEARCH_TIME_S
    check_tree(store.repo.object_store, store.commit(commit).tree, names=False)
    found = Found()
    judged: dict[bytes, str] = {}  # blob id -> why it has no lines (skipped or no match)
    try:
        for path, mode, sha in store.walk(commit):
            if mode in (MODE_LINK, MODE_SUBMODULE) or not wanted(path, deadline):
                continue
            if sha in judged:
                if judged[sha] != "none":
                    _skip(found, path, judged[sha], None)
                continue
            if time.monotonic() > deadline:
                found.stopped = "time_limit"
                break
            if found.bytes_scanned >= settings.SEARCH_MAX_SCAN_BYTES:
                found.stopped = "scan_limit"
                break
            data = store.blob(sha)
            found.bytes_scanned += len(data)
            if len(data) > settings.SEARCH_MAX_FILE_BYTES:
                judged[sha] = "too_large"
                _skip(found, path, "too_large", len(data))
                continue
            if b"\0" in data[:BINARY_PROBE]:
                judged[sha] = "binary"
                _skip(found, path, "binary", len(data))
                continue
            found.files_scanned += 1
            lines = _lines(pattern, data.decode("utf-8", "replace"), path, deadline, limit, found)
            if lines:
                found.files_matched += 1
            else:
                judged[sha] = "none"
            if len(found.matches) >= limit:
                found.stopped = "match_limit"
                break
    except TimeoutError:
        found.stopped = "time_limit"
    return {
        "commit": commit,
        "query": q.text,
        "regex": q.regex,
        "case": q.case,
        "paths": q.paths or None,
        "matches": found.matches,
        "files_scanned": found.files_scanned,
        "files_matched": found.files_matched,
        "bytes_scanned": found.bytes_scanned,
        "skipped": found.skipped,
        "skipped_count": found.skipped_count,
        "truncated": found.stopped is not None,
        "stopped": found.stopped,
        "took_ms": round((time.monotonic() - started) * 1000),
        "limits": {**limits(), "limit": limit},
    }


def _skip(found: Found, path: str, reason: str, size: int | None) -> None:
    found.skipped_count += 1
    if len(found.skipped) < MAX_SKIPPED_LISTED:
        found.skipped.append({"path": path, "reason": reason, "size": size})


def _lines(pattern: Any, text: str, path: str, deadline: float, limit: int, found: Found) -> int:
    """Append the file's matching lines to `found` (up to `limit` in all); how many.
    A TimeoutError from the pattern ends the search (search catches it)."""
    count, pos, line, counted_to = 0, 0, 1, 0
    while pos < len(text) and len(found.matches) < limit:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        m = pattern.search(text, pos, timeout=left, concurrent=True)
        if m is None:
            break
        start = m.start()
        line += text.count("\n", counted_to, start)
        counted_to = start
        begin = text.rfind("\n", 0, start) + 1
        end = text.find("\n", start)
        end = len(text) if end == -1 else end
        column = start - begin
        length = min(m.end(), end) - start
        cut = max(0, column - SNIPPET_BEFORE) if end - begin > SNIPPET_CHARS else 0
        snippet = text[begin + cut : min(end, begin + cut + SNIPPET_CHARS)].rstrip("\r")
        found.matches.append(
            {
                "path": path,
                "line": line,
                "column": column + 1,
                "text": snippet,
                "match_start": column - cut,
                "match_end": min(column - cut + length, len(snippet)),
            }
        )
        count += 1
        pos = end + 1  # one result per line: go on from the next line
    return count
