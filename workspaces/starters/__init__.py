"""Starter templates a new workspace can begin from (each folder is one template)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent
NAMES = ("python-http", "static-site", "node-http")
DESCRIPTIONS = {
    "python-http": "Python web app (standard library) with a unittest test",
    "static-site": "Static HTML and CSS site",
    "node-http": "Node.js web app with node:test tests, no npm dependencies",
}


# Symlinks a starter commits (Git stores a link as its target). node-http links its
# node_modules to the dependency cache its [setup] fills at /deps.
SYMLINKS = {"node-http": {"node_modules": "/deps/node_modules"}}


def files(name: str) -> dict[str, bytes]:
    """path -> content of every file of a starter."""
    base = ROOT / name
    return {
        str(p.relative_to(base)): p.read_bytes()
        for p in sorted(base.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }
