"""`workspace.toml`: how a workspace runs (format in the README), parsed into types.

Errors name the line, so a person can fix the file; the operator's maxima are applied
later, when a run is prepared.
"""

import re
import tomllib
from dataclasses import dataclass, field
from typing import Any

from core.errors import Invalid
from workspaces.paths import InvalidPath, clean_path

FILENAME = "workspace.toml"


class ConfigError(Invalid):
    code = "invalid_workspace_toml"


@dataclass(frozen=True)
class Sandbox:
    image: str = "berth-sandbox:bookworm"
    runtime: str = "runc"
    cpus: float = 1.0
    memory_mb: int = 1024
    disk_mb: int = 2048
    timeout_s: int = 600


@dataclass(frozen=True)
class Setup:
    command: str = ""
    cache_key: tuple[str, ...] = ()


@dataclass(frozen=True)
class Service:
    command: str = ""
    port: int = 8000
    health_path: str = "/"


@dataclass(frozen=True)
class Deploy(Service):
    build: str = ""


@dataclass(frozen=True)
class WorkspaceConfig:
    sandbox: Sandbox = field(default_factory=Sandbox)
    setup: Setup = field(default_factory=Setup)
    preview: Service = field(default_factory=Service)
    deploy: Deploy = field(default_factory=Deploy)
    artifacts: tuple[str, ...] = ()
    egress: tuple[str, ...] = ()


_EGRESS = re.compile(
    r"^(\*\.)?[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*"
    r"(:\d{1,5})?$"
)

# section -> key -> (type, check, message)
_NUMBER = (int, float)
_SCHEMA: dict[str, dict[str, tuple[Any, Any, str]]] = {
    "sandbox": {
        "image": (str, bool, "a non-empty image name"),
        "runtime": (str, lambda v: v in ("runc", "gvisor"), '"runc" or "gvisor"'),
        "cpus": (_NUMBER, lambda v: 0 < v <= 64, "a number of CPUs above 0"),
        "memory_mb": (int, lambda v: v >= 16, "whole megabytes, at least 16"),
        "disk_mb": (int, lambda v: v >= 16, "whole megabytes, at least 16"),
        "timeout_s": (int, lambda v: v >= 1, "whole seconds, at least 1"),
    },
    "setup": {
        "command": (str, None, "a shell command"),
        "cache_key": (
            list,
            lambda v: all(isinstance(x, str) and x for x in v),
            "a list of file paths",
        ),
    },
    "preview": {
        "command": (str, None, "a shell command"),
        "port": (int, lambda v: 1 <= v <= 65535, "a port from 1 to 65535"),
        "health_path": (str, lambda v: v.startswith("/"), "a path starting with /"),
    },
    "artifacts": {
        "paths": (list, lambda v: all(isinstance(x, str) and x for x in v), "a list of paths"),
    },
    "network": {
        "egress": (
            list,
            lambda v: all(isinstance(x, str) and _EGRESS.match(x) for x in v),
            'a list of "host", "host:port" or "*.domain"',
        ),
    },
}
_SCHEMA["deploy"] = {**_SCHEMA["preview"], "build": (str, None, "a shell command")}


def _line_of(text: str, section: str, key: str | None) -> int | None:
    """The line a section (or a key in it) is on, for error messages."""
    current = None
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if m := re.match(r"^\[\s*([A-Za-z0-9_.-]+)\s*\]", stripped):
            current = m.group(1)
            if key is None and current == section:
                return number
        elif key and current == section and re.match(rf"^{re.escape(key)}\s*=", stripped):
            return number
    return None


def _fail(text: str, message: str, section: str, key: str | None = None) -> ConfigError:
    line = _line_of(text, section, key)
    where = f"{FILENAME}, line {line}" if line else FILENAME
    return ConfigError(f"{where}: {message}", {"line": line, "section": section, "key": key})


def parse(text: str) -> WorkspaceConfig:
    """A typed config from the file's text, or ConfigError naming the line at fault."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        line = getattr(e, "lineno", None)
        raise ConfigError(f"{FILENAME}: {e}", {"line": line}) from None
    for section, value in data.items():
        if section not in _SCHEMA:
            raise _fail(
                text,
                f"unknown section [{section}]; known: {', '.join('[' + s + ']' for s in _SCHEMA)}.",
                section,
            )
        if not isinstance(value, dict):
            raise _fail(text, f"{section} must be a [{section}] table.", section)
        for key, item in value.items():
            spec = _SCHEMA[section].get(key)
            if spec is None:
                raise _fail(
                    text,
                    f"unknown key {key!r} in [{section}]; known: {', '.join(_SCHEMA[section])}.",
                    section,
                    key,
                )
            kind, check, wanted = spec
            bad_type = not isinstance(item, kind) or isinstance(item, bool)
            if bad_type or (check is not None and not check(item)):
                raise _fail(text, f"[{section}] {key} must be {wanted}.", section, key)

    def table(name: str) -> dict[str, Any]:
        return dict(data.get(name, {}))

    setup = table("setup")
    cache_key = []
    for raw in setup.get("cache_key", ()):
        # Setup sees only these entries, found by exact path: "./a", "a/" and "a//b"
        # must name what they say, or setup would quietly see nothing.
        path = re.sub(r"/+", "/", raw).strip()
        while path.startswith("./"):
            path = path[2:]
        try:
            cache_key.append(clean_path(path.rstrip("/"), what="cache_key path"))
        except InvalidPath as e:
            raise _fail(text, f"[setup] cache_key: {e.message}", "setup", "cache_key") from None
    return WorkspaceConfig(
        sandbox=Sandbox(**table("sandbox")),
        setup=Setup(command=setup.get("command", ""), cache_key=tuple(cache_key)),
        preview=Service(**table("preview")),
        deploy=Deploy(**table("deploy")),
        artifacts=tuple(table("artifacts").get("paths", ())),
        egress=tuple(table("network").get("egress", ())),
    )
