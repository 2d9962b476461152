"""The suite's own numbers, from the JUnit XML `make test JUNIT_DIR=<dir>` writes: which
tests passed (compared with bench/suite_passed_before.txt: nothing may be lost), and
where the time went (by file, the slowest tests).

Run by hand: `.venv/bin/python bench/suite.py <junit dir> [--slowest N]`. The SQLite
pass is `sqlite.xml` plus `sqlite-alone.xml` (its `alone` tests), PostgreSQL's is
`postgres.xml`. Times are each test's setup, call and teardown as JUnit records them:
under parallel workers they overlap, so their sum is work, not wall time.
"""

import argparse
import collections
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

BEFORE = Path(__file__).resolve().parent / "suite_passed_before.txt"
PASSES = {"sqlite": ("sqlite.xml", "sqlite-alone.xml"), "postgres": ("postgres.xml",)}


def cases(path: Path) -> list[tuple[str, str, float]]:
    """(id, outcome, seconds) of each test case in one JUnit file."""
    found = []
    # Our own pytest wrote it (not untrusted input).
    for case in ET.parse(path).iter("testcase"):  # noqa: S314
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = child.tag
        ident = f"{case.get('classname')}::{case.get('name')}"
        found.append((ident, outcome, float(case.get("time") or 0)))
    return found


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("junit_dir", type=Path)
    parser.add_argument("--slowest", type=int, default=30)
    args = parser.parse_args()

    before: dict[str, set[str]] = collections.defaultdict(set)
    for line in BEFORE.read_text().splitlines():
        if line and not line.startswith("#"):
            name, ident = line.split(" ", 1)
            before[name].add(ident)

    lost = False
    everything: list[tuple[str, str, float]] = []
    for name, files in PASSES.items():
        found = [
            c for f in files if (args.junit_dir / f).exists() for c in cases(args.junit_dir / f)
        ]
        if not found:
            print(f"{name}: no JUnit XML in {args.junit_dir}")
            continue
        everything += found
        outcomes = collections.Counter(o for _, o, _ in found)
        passed = {i for i, o, _ in found if o == "passed"}
        gone, new = sorted(before[name] - passed), sorted(passed - before[name])
        runtimes = {r: sum(f"[{r}" in i for i in passed) for r in ("runc", "gvisor")}
        earlier = {r: sum(f"[{r}" in i for i in before[name]) for r in ("runc", "gvisor")}
        print(
            f"{name}: {dict(outcomes)}; before {len(before[name])} passed; "
            f"{len(gone)} no longer pass here, {len(new)} newly pass here; "
            f"runtime parametrisations passed {runtimes} (before {earlier})"
        )
        for ident in gone:
            print(f"  - {ident}")
        for ident in new:
            print(f"  + {ident}")
        lost |= bool(gone)

    by_file: dict[str, float] = collections.defaultdict(float)
    for ident, _, seconds in everything:
        by_file[ident.split("::")[0]] += seconds
    print("\nseconds by file (both passes)")
    for path, seconds in sorted(by_file.items(), key=lambda f: -f[1])[: args.slowest]:
        print(f"{seconds:8.1f}  {path}")
    print(f"\nthe {args.slowest} slowest tests")
    for ident, _, seconds in sorted(everything, key=lambda c: -c[2])[: args.slowest]:
        print(f"{seconds:8.1f}  {ident}")
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
