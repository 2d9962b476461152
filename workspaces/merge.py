"""A write made from an older commit of its branch, carried onto the branch's head: the
editor's save, the API's and MCP's writes (`workspaces.actions.commit_changes` with a
`base_commit` the branch has moved past). Nobody's change is reverted unseen.

Per changed path, with `b` its entry at the base commit and `t` at the head:
1. `t == b`: the branch did not touch it since; the change applies as it is.
2. A write whose content the head already has: nothing to merge.
3. A write of a text file both sides changed: a three-way merge of its lines (diff3,
   `merge_lines`). Changes in separate places are merged; a place both changed
   differently (touching or adjacent, as git counts them) is an overlap.
4. Anything else both sides changed (deleted or renamed on the branch, added on both,
   a link, a binary or an oversized file, a delete or rename of a changed file) is an
   overlap as a whole.
Overlaps refuse the commit (`Overlap`, 409 `conflict`), with what the writer's version
would lose: the branch's lines at each overlapping place, beside the writer's. A writer
who has seen them may overwrite them (`overwrite` = the head they saw): overlapping
places take the writer's lines, every other change of the branch is kept.
"""

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field

from core.errors import Conflict, Invalid, NotFound
from workspaces.changes import Change
from workspaces.gitstore import MODE_EXEC, MODE_FILE, GitStore

# Lines are matched by difflib (quadratic at worst): past this a file is not merged
# here, and both sides changing it is an overlap (clone and merge with git).
MAX_MERGE_BYTES = 1 << 20
CONTEXT = 2  # lines shown around an overlap
MAX_LOST_CHARS = 64 * 1024  # of one file's "what would be lost", in an answer
TEXT_MODES = (MODE_FILE, MODE_EXEC)

Entry = tuple[int, bytes] | None


@dataclass
class Place:
    """One place both sides changed: the base's, the writer's and the branch's lines,
    with where the branch's start (0-based) in the head's file."""

    base: list[bytes]
    ours: list[bytes]
    theirs: list[bytes]
    at_theirs: int
    ends_at: int  # where the writer's lines end in the merged lines
    before: list[bytes] = field(default_factory=list)  # context lines, as merged
    after: list[bytes] = field(default_factory=list)


@dataclass
class Merged:
    lines: list[bytes]  # overlaps resolved to the writer's lines
    places: list[Place]


def _sync_regions(base: Sequence[bytes], ours: Sequence[bytes], theirs: Sequence[bytes]):
    """Runs of base lines both sides kept as they are, as (base, ours, theirs) start and
    end indices, ending with an empty one at the three ends (diff3's stable regions)."""
    a = difflib.SequenceMatcher(None, base, ours, autojunk=False).get_matching_blocks()
    b = difflib.SequenceMatcher(None, base, theirs, autojunk=False).get_matching_blocks()
    out = []
    i = j = 0
    while i < len(a) and j < len(b):
        a_base, a_at, a_len = a[i]
        b_base, b_at, b_len = b[j]
        start, end = max(a_base, b_base), min(a_base + a_len, b_base + b_len)
        if start < end:
            ours_at, theirs_at = a_at + start - a_base, b_at + start - b_base
            out.append(
                (start, end, ours_at, ours_at + end - start, theirs_at, theirs_at + end - start)
            )
        if a_base + a_len < b_base + b_len:
            i += 1
        else:
            j += 1
    out.append((len(base), len(base), len(ours), len(ours), len(theirs), len(theirs)))
    return out


def merge_lines(base: list[bytes], ours: list[bytes], theirs: list[bytes]) -> Merged:
    """diff3: between stable regions, a side that left the base's lines as they were
    takes the other side's; both the same is that; both different is an overlap (the
    writer's lines taken, the place reported)."""
    lines: list[bytes] = []
    places: list[Place] = []
    z = o = t = 0
    for z_start, z_end, o_start, o_end, t_start, t_end in _sync_regions(base, ours, theirs):
        was, mine, yours = base[z:z_start], ours[o:o_start], theirs[t:t_start]
        if mine in (was, yours):
            lines.extend(yours)
        elif yours == was:
            lines.extend(mine)
        else:
            # Lines both added alike at its edges are no overlap (git's zealous merge).
            head = 0
            while head < min(len(mine), len(yours)) and mine[head] == yours[head]:
                head += 1
            tail = 0
            while tail < min(len(mine), len(yours)) - head and mine[-1 - tail] == yours[-1 - tail]:
                tail += 1
            lines.extend(mine[:head])
            before = lines[-CONTEXT:]
            mine_at, yours_at = mine[head : len(mine) - tail], yours[head : len(yours) - tail]
            lines.extend(mine_at)
            places.append(Place(was, mine_at, yours_at, t + head, len(lines), before))
            lines.extend(mine[len(mine) - tail :])
        lines.extend(base[z_start:z_end])
        z, o, t = z_end, o_end, t_end
    for place in places:
        place.after = lines[place.ends_at : place.ends_at + CONTEXT]
    return Merged(lines, places)


WHY = {
    "both_changed": "changed in the same places on the branch since the base commit",
    "deleted": "deleted or renamed on the branch since the base commit",
    "added": "added on the branch too, with other content",
    "not_text": "not a text file both sides changed",
    "too_large": f"larger than {MAX_MERGE_BYTES // (1 << 20)} MB, too large to merge here",
    "changed": "changed on the branch since the base commit",
}


@dataclass
class Lost:
    """What one path's overlap would lose: why, and the places as a diff (the branch's
    lines `-`, the writer's `+`)."""

    path: str
    why: str  # "both_changed" | "deleted" | "added" | "not_text" | "too_large" | "changed"
    diff: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "why": self.why, "message": WHY[self.why], "diff": self.diff}


class Overlap(Conflict):
    """The writer's changes overlap the branch's since its base: nothing was written."""

    def __init__(self, branch: str, base: str, head: str, lost: list[Lost]) -> None:
        paths = [item.path for item in lost]
        super().__init__(
            f"The branch {branch!r} has moved since {base[:12]} and changed what this "
            f"write changes in {len(paths)} file(s) ({', '.join(paths[:10])}), so "
            "nothing was written (the details show what this write would undo of "
            "theirs): reload, apply your change to the new head and write it with that "
            "head as base_commit.",
            {
                "head": head,
                "base_commit": base,
                "paths": paths,
                "files": [item.as_dict() for item in lost],
            },
        )
        self.lost = lost


def onto_head(
    store: GitStore,
    changes: list[Change],
    branch: str,
    base_commit: str,
    head: str,
    overwrite: str | None = None,
) -> list[str]:
    """Carry `changes`, made against `base_commit`, onto `head`: writes are merged in
    place (their content replaced by the merge). Returns the paths merged with the
    branch's changes; raises Overlap, or Conflict when the base is not a commit here.
    `overwrite`: the head whose overlapping places the writer saw; while the branch is
    still there, those take the writer's lines."""
    # Only a commit a branch or a tag reaches (or Berth pinned) is a base: the store
    # also holds the objects of refused pushes, which nothing may be merged from.
    if not store.is_base(base_commit):
        raise Conflict(
            f"The branch {branch!r} has moved since {base_commit[:12]}, a commit this "
            "workspace does not have; reload and apply your change to the new head.",
            {"head": head, "base_commit": base_commit},
        )
    resolve = overwrite == head
    merged: list[str] = []
    lost: list[Lost] = []
    for change in changes:
        for path in [change.path, *([change.to] if change.op == "rename" and change.to else [])]:
            was, now = _entry(store, base_commit, path), _entry(store, head, path)
            if was == now:
                continue
            if change.op != "write" or path != change.path:
                lost.append(Lost(path, "deleted" if not now else "added" if not was else "changed"))
                continue
            assert change.content is not None
            if now is not None and now[0] in TEXT_MODES and store.blob(now[1]) == change.content:
                continue
            outcome = _merge_write(store, change, was, now, resolve)
            if isinstance(outcome, Lost):
                lost.append(outcome)
            elif outcome:
                merged.append(change.path)
    if lost:
        raise Overlap(branch, base_commit, head, lost)
    return merged


def _merge_write(
    store: GitStore, change: Change, was: Entry, now: Entry, resolve: bool
) -> Lost | bool:
    """One write both sides changed: merged (True, its content replaced), resolved to
    the writer's version (False), or what it would lose."""
    assert change.content is not None
    if now is None:
        return False if resolve else Lost(change.path, "deleted")
    if now[0] not in TEXT_MODES or (was is not None and was[0] not in TEXT_MODES):
        return False if resolve else Lost(change.path, "not_text")
    theirs = store.blob(now[1])
    base = store.blob(was[1]) if was is not None else b""
    sides = (base, change.content, theirs)
    if any(len(s) > MAX_MERGE_BYTES for s in sides):
        return False if resolve else Lost(change.path, "too_large")
    if any(b"\0" in s[:8000] for s in sides):
        return False if resolve else Lost(change.path, "not_text")
    result = merge_lines(*(s.splitlines(keepends=True) for s in sides))
    if result.places and not resolve:
        return Lost(change.path, "added" if was is None else "both_changed", _lost(result))
    change.content = b"".join(result.lines)
    return True


def _lost(result: Merged) -> str:
    """The places as a unified-looking diff: context, then the branch's lines (what the
    writer's version would lose) and the writer's, with the head's line numbers."""
    out: list[str] = []
    size = 0
    for place in result.places:
        start = place.at_theirs + 1
        hunk = [f"@@ line {start} on the branch: theirs (-), yours (+) @@\n"]
        hunk += [" " + _text(line) for line in place.before]
        hunk += ["-" + _text(line) for line in place.theirs]
        hunk += ["+" + _text(line) for line in place.ours]
        hunk += [" " + _text(line) for line in place.after]
        text = "".join(hunk)
        if size + len(text) > MAX_LOST_CHARS:
            out.append("@@ … more places not shown @@\n")
            break
        out.append(text)
        size += len(text)
    return "".join(out)


def _text(line: bytes) -> str:
    text = line.decode("utf-8", "replace")
    return text if text.endswith("\n") else text + "\n\\ No newline at end of file\n"


def _entry(store: GitStore, commit: str, path: str) -> Entry:
    try:
        return store.lookup(commit, path)
    except (NotFound, Invalid):
        return None
