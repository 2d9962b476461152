"""The sandbox image is the same whatever umask its builder has (Berth's own processes
run under umask 077): its recipe tag cannot tell, so its files must not differ either.

Host-side, without debootstrap: the setup script's own lines that write Berth's files
(`mkdir /usr/local/lib/berth`, the scripts it `cat`s) run through the build's step
runner with this process at umask 077, and the root is tarred by the build's tar step;
the layer's modes are the recipe's. A whole build under umask 077 was compared by hand
with one under 022: 43,487 paths, identical modes (see docs/security.md 28).
"""

import os
import subprocess
import sys
import tarfile
from pathlib import Path

from sandbox import images
from tests.support.servers import ROOT


def berth_lines(rootfs: Path) -> str:
    """The setup script from its `mkdir -p /workspace` to its last `chmod`, aimed at
    `rootfs` instead of the chroot's /."""
    lines = images.SETUP_SCRIPT.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("mkdir -p /workspace"))
    end = max(i for i, line in enumerate(lines) if line.startswith("chmod "))
    script = "\n".join(["set -eu", *lines[start : end + 1]]) + "\n"
    for top in ("/workspace", "/deps", "/app", "/usr/local"):
        script = script.replace(f" {top}", f" {rootfs}{top}")
    return script


def layer_modes(rootfs: Path, tmp: Path) -> dict[str, int]:
    tarball = tmp / f"{rootfs.name}.tar"
    images._tar(rootfs, tarball, tmp / "tar.log")
    with tarfile.open(tarball) as tar:
        return {m.name: m.mode for m in tar.getmembers()}


def test_the_build_gives_the_recipes_modes_under_a_umask_of_077(tmp_path):
    recipe = subprocess.run(
        [sys.executable, "-c", "from sandbox.images import recipe_tag; print(recipe_tag())"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        umask=0o077,
    ).stdout.strip()
    assert recipe == images.recipe_tag()

    rootfs = tmp_path / "rootfs"
    log = tmp_path / "step.log"
    old = os.umask(0o077)
    try:
        rootfs.mkdir()  # 0700: as a builder under umask 077 makes it
        # debootstrap's part (through the same runner): the tree the setup writes into.
        images._run(["mkdir", "-p", f"{rootfs}/usr/local/bin"], log, timeout=60)
        images._run(["sh", "-c", berth_lines(rootfs)], log, timeout=60)
        modes = layer_modes(rootfs, tmp_path)
    finally:
        os.umask(old)

    assert modes["."] == 0o755  # the image's /
    for folder in ("usr", "usr/local", "usr/local/bin", "usr/local/lib", "usr/local/lib/berth"):
        assert modes[f"./{folder}"] == 0o755, folder
    assert modes["./usr/local/lib/berth/berth_files.py"] == 0o644
    assert modes["./usr/local/lib/berth/berth_pty.py"] == 0o644
    assert modes[f".{images.SESSION_INIT}"] == 0o755
    assert modes[f".{images.EGRESS_WAIT}"] == 0o755


def test_without_the_builds_own_umask_the_library_would_be_the_roots_alone(tmp_path):
    """What the test above holds against: the same lines in a shell of umask 077."""
    rootfs = tmp_path / "plain"
    rootfs.mkdir()
    subprocess.run(["mkdir", "-p", f"{rootfs}/usr/local/bin"], check=True, umask=0o077)
    subprocess.run(["sh", "-c", berth_lines(rootfs)], check=True, umask=0o077)
    assert (rootfs / "usr/local/lib/berth").stat().st_mode & 0o777 == 0o700
