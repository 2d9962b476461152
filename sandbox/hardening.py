"""The kernel surface a sandbox gets: Berth's seccomp profile, and what enforces it.

The profile (sandbox.seccomp, which says how it was made) is sent with every
container Berth creates, so the engine's own default never decides: Docker 20.10's
default still allows io_uring.

runc loads the filter into the host kernel. runsc ignores the container's seccomp
profile unless it was registered with `--oci-seccomp` (then gVisor applies it to the
sandboxed process inside its own kernel): without that flag, `unshare -Ur` gives root
in a user namespace and io_uring works. So a gVisor sandbox is refused on an engine
whose runsc lacks the flag (fail closed), and a run records what enforced its profile.
"""

import hashlib
import json
from typing import Any

from sandbox import seccomp

PROFILE_NAME = "berth-sandbox"
RUNSC_SECCOMP_FLAG = "--oci-seccomp"
# Linux's name -> gVisor's, where they differ: a rule naming only Linux's is skipped by
# runsc, so the call would fail with EPERM (Python's select.select uses pselect6).
# Calls this runsc does not know at all (futex_waitv, landlock_*, openat2, ioprio_*)
# fail with EPERM instead of ENOSYS under gVisor.
GVISOR_NAMES = {"pselect6": "pselect"}


def _for_runsc(profile: dict[str, Any]) -> dict[str, Any]:
    """The profile as gVisor must get it. Its OCI seccomp ignores `errnoRet` (every
    ERRNO rule answers EPERM), and glibc falls back from clone3 to clone only on ENOSYS:
    with the file as it is, no thread could start. So clone3 is SECCOMP_RET_TRACE,
    which answers ENOSYS when no tracer is attached; and ptrace is denied, because a
    tracer could rewrite the stopped call and gVisor, unlike Linux since 4.8, does not
    check the filter again afterwards. gVisor also knows some calls by names of its
    own: those are added beside Linux's (runc ignores a name it does not know)."""
    rules = []
    for rule in profile["syscalls"]:
        names = [n for n in rule["names"] if n != "ptrace"]
        names += [GVISOR_NAMES[n] for n in names if n in GVISOR_NAMES]
        if not names:
            continue
        rule = {**rule, "names": names}
        if names == ["clone3"] and rule["action"] == "SCMP_ACT_ERRNO":
            rule = {k: v for k, v in rule.items() if k != "errnoRet"}
            rule["action"] = "SCMP_ACT_TRACE"
        rules.append(rule)
    return {**profile, "syscalls": rules}


_FILE = seccomp.profile()
# Compact: the engine stores the whole text in the container's HostConfig.
PROFILES = {
    runtime: json.dumps(profile, separators=(",", ":"))
    for runtime, profile in (("runc", _FILE), ("runsc", _for_runsc(_FILE)))
}
_NAMES = {
    hashlib.sha256(text.encode()).hexdigest(): f"{PROFILE_NAME}/{runtime}"
    for runtime, text in PROFILES.items()
}


def security_opt(runtime: str) -> list[str]:
    return ["no-new-privileges", f"seccomp={PROFILES[runtime]}"]


def runtime_enforces_seccomp(runtime: str, runtime_args: list[str] | None) -> bool:
    """Whether the engine's registration of `runtime` applies a container's seccomp
    profile: runc always does; runsc only with --oci-seccomp among its runtimeArgs."""
    if runtime == "runsc":
        return RUNSC_SECCOMP_FLAG in (runtime_args or [])
    return True


def seccomp_record(
    security_opts: list[str], runtime: str, runtime_args: list[str] | None
) -> dict[str, Any]:
    """What the engine says the container got (its HostConfig.SecurityOpt, not what we
    asked for), and whether its runtime enforces it."""
    profiles = [o.partition("=")[2] for o in security_opts if o.startswith("seccomp=")]
    if not profiles:
        profile, digest = "engine default", None
    elif profiles[0] == "unconfined":
        profile, digest = "unconfined", None
    else:
        digest = hashlib.sha256(profiles[0].encode()).hexdigest()
        profile = _NAMES.get(digest, "custom")
    enforced = profile != "unconfined" and runtime_enforces_seccomp(runtime, runtime_args)
    return {
        "profile": profile,
        "sha256": digest,
        "enforced": enforced,
        "enforced_by": (
            f"runsc {RUNSC_SECCOMP_FLAG} (inside gVisor)"
            if runtime == "runsc"
            else f"{runtime} (host kernel)"
        )
        if enforced
        else None,
    }


def shown_security_opt(security_opts: list[str]) -> list[str]:
    """The container's security options as recorded on a run: the profile by name and
    digest, not its 13 kB of JSON."""
    shown = []
    for option in security_opts:
        if option.startswith("seccomp=") and option != "seccomp=unconfined":
            digest = hashlib.sha256(option.partition("=")[2].encode()).hexdigest()
            option = f"seccomp={_NAMES.get(digest, 'custom')}@sha256:{digest[:12]}"
        shown.append(option)
    return shown
