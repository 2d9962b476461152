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
- each line: past SEARCH_MAX_LINE_BYTES it is searched as if it ended there (counted in
  `lines_cut`);
- the work: SEARCH_MAX_SCAN_BYTES read and SEARCH_TIME_S of wall time, regex matching
  included.
Patterns (the query and the globs) run on RE2 (google-re2), not a backtracking engine:
matching is linear in the text, so `(a|aa)+$` simply completes, and building a pattern
is bounded by SEARCH_REGEX_MAX_BYTES (RE2's max_mem: program and DFA cache together;
`re2.compile` keeps 128 patterns, so a process holds at most 128 times that).
The `regex` package Berth used before expanded counted repeats when it compiled, with no
timeout over that: `(?:(?:a{100}){100}){30}` (23 characters) took 88 MB, 42 characters
23 GB. RE2 refuses repeats that multiply past 1,000 and programs past max_mem at parse
time. An RE2 call cannot be interrupted and costs up to (bytes x program size) when its
DFA gives up, so the file is searched a chunk of whole lines at a time, sized by the
program, and the clock is read between chunks: a pattern overruns SEARCH_TIME_S by at
most one chunk (one cut line at the least). The file's UTF-8 bytes are searched once
(re2's `search(str, pos)` re-encodes the whole text on every call); byte offsets become
character columns per matching line. The engine releases the GIL while it matches.
A search stopped by a bound answers what it found so far, with `truncated` and why.
"""

import re
import time
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import re2
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
# Bytes x program instructions one engine call may cover: ~0.1 s when RE2's DFA gives up
# and it steps its NFA (2-5 ns per byte and instruction measured here). An ordinary
# pattern (tens of instructions) gets chunks of a megabyte, the whole file.
CHUNK_WORK = 1 << 24
MAX_CHUNK = 1 << 20
# RE2 refuses these two itself: a pattern that is too big, not one that is wrong.
TOO_LARGE = ("invalid repetition size", "pattern too large")
# What RE2 says of a backreference and of lookaround, said in words a person can act on.
UNSUPPORTED = re.compile(r"invalid escape sequence: \\[1-9]|invalid perl operator: \(\?<?[=!]")


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
    lines_cut: int = 0
    stopped: str | None = None


def limits() -> dict[str, Any]:
    return {
        "max_query_chars": settings.SEARCH_MAX_QUERY_CHARS,
        "max_file_bytes": settings.SEARCH_MAX_FILE_BYTES,
        "max_line_bytes": settings.SEARCH_MAX_LINE_BYTES,
        "max_matches": settings.SEARCH_MAX_MATCHES,
        "max_scan_bytes": settings.SEARCH_MAX_SCAN_BYTES,
        "time_s": settings.SEARCH_TIME_S,
    }


def compile_query(q: Query) -> tuple[Any, Callable[[str], bool], int]:
    """The pattern, the path filter and the line limit, or Invalid with a stable code:
    `empty_query`, `query_too_long`, `invalid_regex`, `regex_too_large`, `invalid_glob`,
    `invalid_case`, `below_minimum` / `above_maximum` (limit)."""
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
    options = _options()
    options.case_sensitive = not insensitive
    # A match never crosses a line (as grep): one line is one result, and a file can be
    # searched a chunk of whole lines at a time without losing a match.
    options.never_nl = True
    options.literal = not q.regex
    # (?m): ^ and $ at every line's ends, as the `regex` package's MULTILINE did.
    source = "(?m)" + text if q.regex else text
    try:
        pattern = re2.compile(source, options)
    except re2.error as e:
        raise _refused(e) from None
    return pattern, path_filter(q.paths), limit


def _options() -> re2.Options:
    options = re2.Options()
    options.max_mem = settings.SEARCH_REGEX_MAX_BYTES
    options.log_errors = False  # a tenant's refused pattern is an answer, not a log line
    return options


def _refused(e: Exception) -> Invalid:
    reason = e.args[0] if e.args else str(e)
    reason = reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)
    if reason.startswith(TOO_LARGE):
        return Invalid(
            f"The regular expression is too large ({reason}): counted repeats may multiply "
            f"to at most 1,000 and a pattern may take {settings.SEARCH_REGEX_MAX_BYTES // 1024}"
            " KiB to build. Use fewer or smaller counted repeats ({n,m}), or + and *.",
            {"field": "q", "reason": reason, "max_bytes": settings.SEARCH_REGEX_MAX_BYTES},
            code="regex_too_large",
        )
    hint = (
        " Search uses RE2, which has no backreferences (\\1) and no lookaround "
        "((?=, (?!, (?<=, (?<!): match the text itself instead."
        if UNSUPPORTED.search(reason)
        else " Search uses RE2's syntax (https://github.com/google/re2/wiki/Syntax)."
    )
    return Invalid(
        f"The regular expression is not valid: {reason}.{hint}",
        {"field": "q", "reason": reason},
        code="invalid_regex",
    )


def path_filter(globs: str | None) -> Callable[[str], bool]:
    """A test of a path against comma-separated globs: `*` and `?` stay within a folder,
    `**` crosses folders, a glob without `/` matches a name at any depth (`*.py`), one
    ending in `/` everything below that folder (`src/`)."""
    if globs is None or not globs.strip():
        return lambda path: True
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
    options = _options()
    options.dot_nl = True  # `**` is `.*`: any name, whatever it holds
    try:
        # RE2 as the query: a glob of many stars matches in linear time, no clock needed.
        pattern = re2.compile("|".join(f"(?:{_translate(g)})" for g in parts), options)
    except re2.error as e:
        raise Invalid(
            f"The path filter is too complex: {e}. Use fewer or shorter globs.",
            {"field": "paths"},
            code="invalid_glob",
        ) from None
    return lambda path: pattern.fullmatch(path) is not None


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
            out.append(re2.escape(glob[i]))
            i += 1
    return "".join(out)


def search(store: GitStore, commit: str, q: Query) -> dict[str, Any]:
    """The lines of the commit's files that match, each once, in tree order.

    1. Check the query (compile_query) and measure the tree against the commit caps.
    2. Walk the tree's entries as objects; skip links, submodules and paths the glob
       leaves out (no blob is read for them).
    3. Read each blob once (a blob named at many paths is judged once); skip and name
       one past the file bound or binary.
    4. Cut its lines past SEARCH_MAX_LINE_BYTES and find matching lines in its bytes, a
       chunk of lines at a time, reading the clock between chunks; one result per line,
       its column in characters (invalid UTF-8 replaced: a Latin-1 file is text).
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
            if mode in (MODE_LINK, MODE_SUBMODULE) or not wanted(path):
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
            lines = _lines(pattern, _cut(data, found), path, deadline, limit, found)
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
        "lines_cut": found.lines_cut,
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


def _cut(data: bytes, found: Found) -> bytes:
    """The file with each line past SEARCH_MAX_LINE_BYTES cut there (at a character's
    start), counted in `found.lines_cut`; the file itself when no line is that long."""
    cap = settings.SEARCH_MAX_LINE_BYTES
    size = len(data)
    pieces, kept, pos = [], 0, 0
    # A line is long when no newline comes within cap bytes of its start. Short lines are
    # stepped over a window at a time (the last newline in it), so a file costs about
    # size / cap calls, not one per line.
    while pos + cap < size:
        newline = data.rfind(b"\n", pos, pos + cap + 1)
        if newline != -1:
            pos = newline + 1
            continue
        stop = pos + cap
        while stop > pos and data[stop] & 0xC0 == 0x80:  # not inside a character
            stop -= 1
        pieces.append(data[kept:stop])
        end = data.find(b"\n", pos + cap)
        kept = pos = size if end == -1 else end
        found.lines_cut += 1
    if not pieces:
        return data
    pieces.append(data[kept:])
    return b"".join(pieces)


def _lines(pattern: Any, data: bytes, path: str, deadline: float, limit: int, found: Found) -> int:
    """Append the file's matching lines to `found` (up to `limit` in all); how many.
    Searches the bytes in chunks of whole lines; TimeoutError when the clock runs out
    between two (search catches it)."""
    chunk = min(MAX_CHUNK, CHUNK_WORK // max(1, pattern.programsize))
    count, pos, line, counted_to, size = 0, 0, 1, 0, len(data)
    while pos < size and len(found.matches) < limit:
        if time.monotonic() > deadline:
            raise TimeoutError
        stop = data.find(b"\n", min(size, pos + chunk))
        stop = size if stop == -1 else stop
        m = pattern.search(data, pos, stop)
        if m is None:
            pos = stop + 1
            continue
        start = m.start()
        line += data.count(b"\n", counted_to, start)
        counted_to = start
        begin = data.rfind(b"\n", 0, start) + 1
        end = data.find(b"\n", start)
        end = size if end == -1 else end
        # Byte offsets to characters, decoding this line only (as the whole file decoded
        # with replacement would: a newline always ends a character).
        column = len(data[begin:start].decode("utf-8", "replace"))
        text = data[begin:end].decode("utf-8", "replace")
        length = len(data[start : min(m.end(), end)].decode("utf-8", "replace"))
        cut = max(0, column - SNIPPET_BEFORE) if len(text) > SNIPPET_CHARS else 0
        snippet = text[cut : cut + SNIPPET_CHARS].rstrip("\r")
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
