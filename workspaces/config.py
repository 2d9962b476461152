"""`workspace.toml`: how a workspace runs, parsed into frozen pydantic models.

Each model is one table of the file. Types are strict where a person could mean two
things (a bool is not a number, 16.0 is not whole megabytes), unknown tables and keys
are refused, and each field's description is what the error says it must be. Errors
name the line, so a person can fix the file; the operator's maxima are applied later,
when a run is prepared (sandbox.limits).
"""

import re
import tomllib
from typing import Annotated, Any, Literal, cast

from django.conf import settings
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic_core import PydanticCustomError

from core.errors import Invalid
from workspaces.paths import InvalidPath, clean_path

FILENAME = "workspace.toml"


class ConfigError(Invalid):
    code = "invalid_workspace_toml"


def _tuple(value: Any) -> Any:
    # TOML arrays arrive as lists; the parsed config is immutable, so they are kept as
    # tuples (strict mode would refuse a list for a tuple field).
    return tuple(value) if isinstance(value, list) else value


_EGRESS = re.compile(
    r"^(\*\.)?[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*"
    r"(:\d{1,5})?$"
)


def _egress_entry(entry: str) -> str:
    if not _EGRESS.match(entry):
        raise ValueError("not a host, host:port or *.domain")
    return entry


def _cache_key(paths: tuple[str, ...]) -> tuple[str, ...]:
    """The cache_key paths as setup looks them up: by exact path, so "./a", "a/" and
    "a//b" must name what they say, or setup would quietly see nothing
    (docs/security.md, 13: setup sees only these entries)."""
    cleaned = []
    for raw in paths:
        path = re.sub(r"/+", "/", raw).strip()
        while path.startswith("./"):
            path = path[2:]
        try:
            cleaned.append(clean_path(path.rstrip("/"), what="cache_key path"))
        except InvalidPath as e:
            raise PydanticCustomError("workspace_toml", "{reason}", {"reason": e.message}) from None
    return tuple(cleaned)


_NonEmpty = Annotated[str, Field(min_length=1)]
_Paths = Annotated[tuple[_NonEmpty, ...], BeforeValidator(_tuple)]
_Egress = Annotated[
    tuple[Annotated[str, AfterValidator(_egress_entry)], ...], BeforeValidator(_tuple)
]
_Whole16 = Annotated[int, Field(ge=16, description="whole megabytes, at least 16")]
_Cpus = Annotated[int, Field(gt=0, le=64)] | Annotated[float, Field(gt=0, le=64)]


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Sandbox(_Table):
    # Read when a config is made, so the operator's SANDBOX_IMAGE is the default.
    image: _NonEmpty = Field(
        default_factory=lambda: settings.SANDBOX_IMAGE, description="a non-empty image name"
    )
    runtime: Literal["runc", "gvisor"] = Field(default="runc", description='"runc" or "gvisor"')
    # An int stays an int (2, not 2.0): the contract notice shows what the file says.
    cpus: _Cpus = Field(default=1.0, description="a number of CPUs above 0")
    memory_mb: _Whole16 = 1024
    disk_mb: _Whole16 = 2048
    timeout_s: int = Field(default=600, ge=1, description="whole seconds, at least 1")


class Setup(_Table):
    command: str = Field(default="", description="a shell command")
    cache_key: Annotated[_Paths, AfterValidator(_cache_key)] = Field(
        default=(), description="a list of file paths"
    )


class Service(_Table):
    command: str = Field(default="", description="a shell command")
    port: int = Field(default=8000, ge=1, le=65535, description="a port from 1 to 65535")
    health_path: str = Field(default="/", pattern=r"^/", description="a path starting with /")


class Deploy(Service):
    build: str = Field(default="", description="a shell command")


class Artifacts(_Table):
    paths: _Paths = Field(default=(), description="a list of paths")


class Network(_Table):
    egress: _Egress = Field(default=(), description='a list of "host", "host:port" or "*.domain"')


class _File(_Table):
    """The file as written: one field per table, in the order errors list them."""

    sandbox: Sandbox = Field(default_factory=Sandbox)
    setup: Setup = Field(default_factory=Setup)
    preview: Service = Field(default_factory=Service)
    artifacts: Artifacts = Field(default_factory=Artifacts)
    network: Network = Field(default_factory=Network)
    deploy: Deploy = Field(default_factory=Deploy)


# Each table's model, by the name the file gives it.
_TABLES = {name: cast(type[_Table], field.annotation) for name, field in _File.model_fields.items()}


class WorkspaceConfig(BaseModel):
    """What the rest of Berth reads; `WorkspaceConfig()` is an absent file."""

    model_config = ConfigDict(frozen=True)

    sandbox: Sandbox = Field(default_factory=Sandbox)
    setup: Setup = Field(default_factory=Setup)
    preview: Service = Field(default_factory=Service)
    deploy: Deploy = Field(default_factory=Deploy)
    artifacts: tuple[str, ...] = ()
    egress: tuple[str, ...] = ()


def _line_of(text: str, section: str | None, key: str | None) -> int | None:
    """The line a section (or a key in it; section None: the top level) is on."""
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


def _error(text: str, error: Any) -> ConfigError:
    """One pydantic error as the person who wrote the file reads it."""
    loc = [str(part) for part in error["loc"]]
    section, key = loc[0], (loc[1] if len(loc) > 1 else None)
    if section not in _TABLES:
        known = ", ".join(f"[{s}]" for s in _TABLES)
        message = f"unknown section [{section}]; known: {known}."
        line = _line_of(text, section, None) or _line_of(text, None, section)
    elif key is None:
        # `sandbox = 5` at the top level, not a [sandbox] table.
        message, line = f"{section} must be a [{section}] table.", _line_of(text, None, section)
    else:
        fields = _TABLES[section].model_fields
        line = _line_of(text, section, key)
        if key not in fields:
            message = f"unknown key {key!r} in [{section}]; known: {', '.join(fields)}."
        elif error["type"] == "workspace_toml":
            message = f"[{section}] {key}: {error['msg']}"
        else:
            message = f"[{section}] {key} must be {fields[key].description}."
    where = f"{FILENAME}, line {line}" if line else FILENAME
    return ConfigError(f"{where}: {message}", {"line": line, "section": section, "key": key})


def parse(text: str) -> WorkspaceConfig:
    """A typed config from the file's text, or ConfigError naming the line at fault (the
    first in the file when there are several)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        line = getattr(e, "lineno", None)
        raise ConfigError(f"{FILENAME}: {e}", {"line": line}) from None
    try:
        file = _File.model_validate(data)
    except ValidationError as e:
        errors = [_error(text, err) for err in e.errors()]
        raise min(errors, key=lambda err: err.details["line"] or float("inf")) from None
    return WorkspaceConfig(
        sandbox=file.sandbox,
        setup=file.setup,
        preview=file.preview,
        deploy=file.deploy,
        artifacts=file.artifacts.paths,
        egress=file.network.egress,
    )
