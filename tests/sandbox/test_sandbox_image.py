"""The sandbox image recipe: the mirror comes from the host's apt sources."""

import pytest

from sandbox.images import SandboxImageError, debian_mirror, recipe_tag

DEB822 = """\
Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
"""


def test_it_reads_the_mirror_from_deb822_sources():
    assert (
        debian_mirror({"/etc/apt/sources.list.d/debian.sources": DEB822})
        == "http://deb.debian.org/debian"
    )


def test_it_reads_one_line_sources_and_skips_security_and_deb_src():
    text = (
        "deb-src http://src.example/debian bookworm main\n"
        "deb http://security.debian.org/debian-security bookworm-security main\n"
        "deb [arch=amd64] https://mirror.example/debian/ bookworm main contrib\n"
    )
    assert debian_mirror({"/etc/apt/sources.list": text}) == "https://mirror.example/debian"


def test_a_disabled_stanza_does_not_count():
    disabled = "Enabled: no\n" + DEB822.split("\n\n")[0]
    with pytest.raises(SandboxImageError, match="DEBIAN_MIRROR"):
        debian_mirror({"/etc/apt/sources.list.d/debian.sources": disabled})


def test_an_ubuntu_host_is_told_to_set_debian_mirror():
    ubuntu = "deb http://archive.ubuntu.com/ubuntu jammy main restricted\n"
    with pytest.raises(SandboxImageError, match="DEBIAN_MIRROR"):
        debian_mirror({"/etc/apt/sources.list": ubuntu})


def test_the_tag_carries_the_recipe_hash():
    suite, _, digest = recipe_tag().partition("-")
    assert suite == "bookworm" and len(digest) == 12 and int(digest, 16) >= 0
