"""Every verb Berth records reads as words on the pages (accounts.verbs): a new verb
without words would show its code again."""

import ast
from pathlib import Path

from django.conf import settings

from accounts import verbs
from sessions.models import SessionState

# sessions.lifecycle records an end as f"session.{to}", `to` one of these.
SESSION_ENDS = (SessionState.STOPPED, SessionState.DELETED, SessionState.FAILED, SessionState.LOST)


def recorded_verbs() -> set[str]:
    """The verbs of every record(team, actor, verb, ...) call in Berth's own code."""
    found: set[str] = set()
    base = Path(settings.BASE_DIR)
    # Folder by folder: a glob of the whole checkout would walk .venv and var/ (seconds).
    rooms = (
        d
        for d in base.iterdir()
        if d.is_dir() and not d.name.startswith(".") and d.name not in ("tests", "bench", "var")
    )
    for path in (p for room in rooms for p in room.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and len(node.args) >= 3):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else None
            if getattr(node.func, "id", name) != "record":
                continue
            verb = node.args[2]
            if isinstance(verb, ast.JoinedStr):
                assert path.name == "lifecycle.py", f"a verb made up in {path}: add it here"
                found |= {f"session.{s}" for s in SESSION_ENDS}
                continue
            found |= {
                c.value
                for c in ast.walk(verb)
                if isinstance(c, ast.Constant) and isinstance(c.value, str) and "." in c.value
            }
    return found


def test_every_recorded_verb_has_words():
    found = recorded_verbs()
    assert {"run.started", "run.rerun", "deploy.live", "workspace.committed"} <= found
    assert sorted(found - set(verbs.WORDS)) == []


def test_an_unknown_verb_still_reads_as_words():
    assert verbs.words("widget.made_blue") == "widget made blue"
    assert verbs.words("run.started") == "started a run"
