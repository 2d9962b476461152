"""The base sandbox image, built on this host from Debian: no registry needed.

The recipe (suite, packages, setup script, image config) is hashed into the tag
`berth-sandbox:bookworm-<hash>` and a label, so a changed recipe builds a new image
and every Berth instance sharing the engine agrees on what a tag contains. The
default `SANDBOX_IMAGE` name is an alias that points at the current recipe's image.
"""

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

import docker.errors
from django.conf import settings

from sandbox.engine import engine

REPOSITORY = "berth-sandbox"
SUITE = "bookworm"
DEFAULT_IMAGE = f"{REPOSITORY}:{SUITE}"
VARIANT = "minbase"
INCLUDE = ("python3", "python3-venv", "python3-pip", "git", "ca-certificates", "curl")
# npm's dependencies in bookworm name virtual packages (node-color-support, node-has,
# ...) that debootstrap's resolver cannot satisfy: with npm in --include it fails with
# "Failure while configuring base packages". apt resolves them, in the chroot.
APT_INSTALL = ("nodejs", "npm")

# The egress wrapper (sandbox/egress): a sandbox with an egress policy runs its command
# through it, so nothing the command does can race the proxy the runner agent opens
# inside the sandbox's namespace once the container has started. It execs the command,
# so output and exit still come from the container's main process.
EGRESS_WAIT = "/usr/local/bin/berth-egress-wait"
EGRESS_WAIT_SCRIPT = """\
#!/usr/bin/python3 -IS
import os, socket, sys, time
limit = float(os.environ.get("BERTH_EGRESS_WAIT_S") or 5)
deadline = time.monotonic() + limit
while True:
    try:
        socket.create_connection(("127.0.0.1", 3128), timeout=1).close()
        break
    except OSError:
        if time.monotonic() > deadline:
            sys.stderr.write("[berth] the egress proxy at 127.0.0.1:3128 did not come up "
                             "within %g s, so the command was not started; run it again "
                             "(if this repeats, the runner agent is down).\\n" % limit)
            sys.exit(125)
        time.sleep(0.005)
os.execvp(sys.argv[1], sys.argv[1:])
"""

# The output wrapper of every container but a session's (sandbox/in_image/berth_run.py):
# the command's output framed a read at a time and paced, so a flood of short lines costs
# the engine a message per read, not one per line. An image without the label runs its
# command unwrapped, its output one engine message a line as before.
RUN_WRAPPER = "/usr/local/bin/berth-run"
RUN_WRAPPER_SCRIPT = (Path(__file__).parent / "in_image" / "berth_run.py").read_text()

# The exec channel of a session (sandbox/in_image/berth_session.py): the command of a
# session's container. An image without this label cannot hold a session.
SESSION_INIT = "/usr/local/bin/berth-session"
SESSION_INIT_SCRIPT = (Path(__file__).parent / "in_image" / "berth_session.py").read_text()
# Its file operations (sandbox/in_image/berth_files.py), a module it imports from here.
SESSION_LIB = "/usr/local/lib/berth"
SESSION_FILES_SCRIPT = (Path(__file__).parent / "in_image" / "berth_files.py").read_text()
# Its terminals (sandbox/in_image/berth_pty.py), likewise.
SESSION_PTY_SCRIPT = (Path(__file__).parent / "in_image" / "berth_pty.py").read_text()

# Runs in the chroot as root. Mount points are owned by the sandbox uid because a new
# named volume takes its owner from the image's mount point (docs/architecture.md, "Engine facts").
SETUP_SCRIPT = f"""\
set -eu
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \\
  {" ".join(APT_INSTALL)}
groupadd --gid 1000 sandbox
useradd --uid 1000 --gid 1000 --home-dir /home/sandbox --create-home --shell /bin/sh sandbox
mkdir -p /workspace /deps /app
chown 1000:1000 /workspace /deps /app
cat > {EGRESS_WAIT} <<'WRAPPER'
{EGRESS_WAIT_SCRIPT}WRAPPER
chmod 0755 {EGRESS_WAIT}
cat > {RUN_WRAPPER} <<'RUN_WRAPPER'
{RUN_WRAPPER_SCRIPT}RUN_WRAPPER
chmod 0755 {RUN_WRAPPER}
cat > {SESSION_INIT} <<'SESSION_INIT'
{SESSION_INIT_SCRIPT}SESSION_INIT
chmod 0755 {SESSION_INIT}
mkdir -p {SESSION_LIB}
cat > {SESSION_LIB}/berth_files.py <<'SESSION_FILES'
{SESSION_FILES_SCRIPT}SESSION_FILES
chmod 0644 {SESSION_LIB}/berth_files.py
cat > {SESSION_LIB}/berth_pty.py <<'SESSION_PTY'
{SESSION_PTY_SCRIPT}SESSION_PTY
chmod 0644 {SESSION_LIB}/berth_pty.py
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/cache/debconf/*-old /var/log/*
# The host's name and resolver must not leak into the image; Docker provides both.
rm -f /etc/hostname /etc/resolv.conf
"""

CHANGES = (
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV HOME=/home/sandbox",
    "ENV LANG=C.UTF-8",
    "WORKDIR /workspace",
    "USER 1000:1000",
    f"LABEL berth.egress-wait={EGRESS_WAIT}",
    f"LABEL berth.session={SESSION_INIT}",
    f"LABEL berth.run={RUN_WRAPPER}",
)

# Debian suites debootstrap can fetch from a Debian mirror; an Ubuntu host's sources
# name none of these, so its mirror is never mistaken for Debian's.
DEBIAN_SUITES = frozenset(
    {"buster", "bullseye", "bookworm", "trixie", "forky", "duke", "sid"}
    | {"oldoldstable", "oldstable", "stable", "testing", "unstable"}
)

# The modes the image's files get where the recipe names none: Debian's own.
BUILD_UMASK = 0o022

# debootstrap takes about 71 s here; a slow mirror may take many times that.
DEBOOTSTRAP_TIMEOUT_S = 30 * 60


class SandboxImageError(Exception):
    """A build or check that cannot succeed; the message says what to do."""


def recipe_hash() -> str:
    """First 12 hex characters of the sha256 of the canonical JSON of the recipe."""
    recipe = {
        "suite": SUITE,
        "variant": VARIANT,
        "include": list(INCLUDE),
        "apt_install": list(APT_INSTALL),
        "setup": SETUP_SCRIPT,
        "changes": list(CHANGES),
    }
    canonical = json.dumps(recipe, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def recipe_tag() -> str:
    return f"{SUITE}-{recipe_hash()}"


def _deb822_stanzas(text: str) -> list[dict[str, str]]:
    """Stanzas of a deb822 file as {field (lower case): value}; continuation lines joined."""
    stanzas: list[dict[str, str]] = []
    fields: dict[str, str] = {}
    key = ""
    for line in [*text.splitlines(), ""]:
        if line.startswith("#"):
            continue
        if not line.strip():
            if fields:
                stanzas.append(fields)
            fields, key = {}, ""
        elif line[0].isspace() and key:
            fields[key] += " " + line.strip()
        elif ":" in line:
            key, _, value = line.partition(":")
            key = key.strip().lower()
            fields[key] = value.strip()
    return stanzas


_ONE_LINE = re.compile(r"^deb\s+(?:\[[^\]]*\]\s+)?(?P<uri>\S+)\s+(?P<suite>\S+)")


def debian_mirror(sources_text_by_filename: Mapping[str, str]) -> str:
    """The first Debian mirror named in apt sources files, in apt's reading order.

    Keys are file names (`sources.list`, `*.list` one-line format, `*.sources` deb822),
    values their text. A source counts when it is a `deb` (not `deb-src`) http(s) URI
    for a plain Debian suite: `bookworm`, not `bookworm-security` or an Ubuntu suite.
    """

    def usable(uri: str, suites: list[str]) -> bool:
        return uri.startswith(("http://", "https://")) and any(s in DEBIAN_SUITES for s in suites)

    # apt reads sources.list first, then the parts directory in name order.
    names = sorted(sources_text_by_filename, key=lambda n: (Path(n).name != "sources.list", n))
    for name in names:
        text = sources_text_by_filename[name]
        if name.endswith(".sources"):
            for stanza in _deb822_stanzas(text):
                if stanza.get("enabled", "yes").lower() == "no":
                    continue
                if "deb" not in stanza.get("types", "").split():
                    continue
                suites = stanza.get("suites", "").split()
                for uri in stanza.get("uris", "").split():
                    if usable(uri, suites):
                        return uri.rstrip("/")
        elif name.endswith(".list"):
            for line in text.splitlines():
                m = _ONE_LINE.match(line.strip())
                if m and usable(m["uri"], [m["suite"]]):
                    return m["uri"].rstrip("/")
    raise SandboxImageError(
        "No Debian mirror in this host's apt sources (is it Debian?). "
        "Set DEBIAN_MIRROR, e.g. DEBIAN_MIRROR=http://deb.debian.org/debian"
    )


def host_debian_mirror() -> str:
    """DEBIAN_MIRROR if set, else the mirror this host's own apt uses."""
    if mirror := os.environ.get("DEBIAN_MIRROR"):
        return mirror
    apt = Path("/etc/apt")
    files = [apt / "sources.list", *sorted((apt / "sources.list.d").glob("*.list"))]
    files += sorted((apt / "sources.list.d").glob("*.sources"))
    return debian_mirror({str(f): f.read_text() for f in files if f.is_file()})


def ensure_sandbox_image(*, force: bool = False, log: Callable[[str], None] = print) -> str:
    """Make `settings.SANDBOX_IMAGE` usable on the local engine; returns its image id.

    1. An operator's own image (not the default name) is only checked, never built.
    2. Otherwise build `berth-sandbox:bookworm-<hash>` unless it exists (or `force`),
    3. and point the `berth-sandbox:bookworm` alias at it.
    """
    client = engine()
    try:
        client.ping()
    except docker.errors.DockerException as e:
        raise SandboxImageError(
            f"The Docker engine does not answer ({e}); run: scripts/host-setup docker"
        ) from e

    if settings.SANDBOX_IMAGE != DEFAULT_IMAGE:
        try:
            image = client.images.get(settings.SANDBOX_IMAGE)
        except docker.errors.ImageNotFound:
            raise SandboxImageError(
                f"SANDBOX_IMAGE={settings.SANDBOX_IMAGE} is not on this engine. Berth builds "
                f"only {DEFAULT_IMAGE}; pull yours with: docker pull {settings.SANDBOX_IMAGE}"
            ) from None
        log(f"Using the operator's image {settings.SANDBOX_IMAGE} ({image.short_id}).")
        return str(image.id)

    versioned = f"{REPOSITORY}:{recipe_tag()}"
    try:
        image = client.images.get(versioned)
    except docker.errors.ImageNotFound:
        image = None
    if image is None or force:
        _build(versioned, log)
        image = client.images.get(versioned)
    else:
        log(f"{versioned} is up to date ({image.short_id}).")

    if DEFAULT_IMAGE not in image.tags:
        image.tag(REPOSITORY, SUITE)
        log(f"Tagged {versioned} as {DEFAULT_IMAGE}.")
    return str(image.id)


def _build(versioned: str, log: Callable[[str], None]) -> None:
    """debootstrap a root filesystem, set it up in a chroot, tar it, import it."""
    if os.geteuid() != 0:
        raise SandboxImageError(
            "Building the sandbox image needs root (debootstrap and chroot). Run: "
            "sudo .venv/bin/python manage.py build_sandbox_image"
        )
    debootstrap, chroot = _tool("debootstrap"), _tool("chroot")
    mirror = host_debian_mirror()

    build_dir = Path(settings.SANDBOX_IMAGE_BUILD_DIR)
    build_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="berth-sandbox-", dir=build_dir))
    rootfs, tarball = work / "rootfs", work / "rootfs.tar"
    try:
        log(f"debootstrap {SUITE} from {mirror} (takes a minute or two)...")
        _run(
            [
                debootstrap,
                f"--variant={VARIANT}",
                f"--include={','.join(INCLUDE)}",
                SUITE,
                str(rootfs),
                mirror,
            ],
            work / "debootstrap.log",
            timeout=DEBOOTSTRAP_TIMEOUT_S,
            # Its own log says which package failed; its output only says that one did.
            details=rootfs / "debootstrap" / "debootstrap.log",
        )
        log(f"Installing {', '.join(APT_INSTALL)} and the sandbox user in a chroot...")
        # A clean environment: the host's variables must not reach the image.
        _run(
            [chroot, str(rootfs), "/bin/sh", "-c", SETUP_SCRIPT],
            work / "setup.log",
            timeout=DEBOOTSTRAP_TIMEOUT_S,
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"},
        )
        _tar(rootfs, tarball, work / "tar.log")
        log(f"Importing as {versioned}...")
        changes = [*CHANGES, f"LABEL berth.recipe={recipe_hash()}"]
        repository, tag = versioned.split(":")
        answer = engine().api.import_image_from_file(
            str(tarball), repository=repository, tag=tag, changes=changes
        )
        # The engine reports a failed import inside a 200 response's JSON lines.
        for line in str(answer).splitlines():
            if line.strip() and (error := json.loads(line).get("error")):
                raise SandboxImageError(f"docker import failed: {error}")
        log(f"Built {versioned}.")
    finally:
        _remove(work, log)


def _tar(rootfs: Path, tarball: Path, logfile: Path) -> None:
    """The root filesystem as the image's one layer. Its root is 0755 whoever made the
    folder: the tar's `.` entry becomes the image's `/`."""
    rootfs.chmod(0o755)
    _run(
        ["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(tarball), "."],
        logfile,
        timeout=600,
    )


def _tool(name: str) -> str:
    """A host binary's path; sbin directories count even when PATH lacks them."""
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
    if not path:
        raise SandboxImageError(f"{name} is missing; run: scripts/host-setup packages")
    return path


def _run(
    argv: list[str],
    logfile: Path,
    timeout: int,
    env: dict[str, str] | None = None,
    details: Path | None = None,
) -> None:
    """Run quietly into `logfile`; on failure raise with the tail of `details` or the log."""
    with logfile.open("wb") as out:
        try:
            result = subprocess.run(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=timeout,
                env=env,
                check=False,
                # Every step with the same umask, whatever the caller's: a root shell or
                # a `make` under umask 077 (Berth's own processes run so) would make the
                # setup's `mkdir /usr/local/lib/berth`, debootstrap's files and the root
                # itself unreadable to the sandbox user, under the very same recipe tag.
                umask=BUILD_UMASK,
            )
            failure = f"exited with {result.returncode}" if result.returncode else ""
        except subprocess.TimeoutExpired:
            failure = f"did not finish in {timeout} s"
    if failure:
        shown = details if details and details.is_file() else logfile
        tail = "\n".join(shown.read_text(errors="replace").splitlines()[-25:])
        raise SandboxImageError(f"{Path(argv[0]).name} {failure}:\n{tail}")


def _remove(work: Path, log: Callable[[str], None]) -> None:
    """Remove the build directory, unmounting first what debootstrap left mounted.

    A debootstrap that dies mid-way leaves /proc, /sys and (in a container) a bind
    mount of the host's /dev inside the target: removing files there would delete
    the host's. So nothing is removed while anything is still mounted below `work`.
    """
    for point in _mounts_below(work):
        subprocess.run(["umount", "--lazy", point], check=False)
    if left := _mounts_below(work):
        # Logged, not raised: this runs in `finally` and must not hide the build's error.
        log(f"Could not unmount {', '.join(left)}; remove {work} by hand.")
        return
    shutil.rmtree(work, ignore_errors=True)


def _mounts_below(path: Path) -> list[str]:
    """Mount points under `path`, deepest first (/proc/self/mounts escapes spaces)."""
    prefix = f"{path}/"
    points = [
        line.split()[1].replace("\\040", " ")
        for line in Path("/proc/self/mounts").read_text().splitlines()
    ]
    return sorted((p for p in points if p.startswith(prefix)), reverse=True)
