"""release.image's pure parts, on a fake Debian root in tmp_path: dpkg's status parsed, the
run-time closure of the wanted packages, the other packages' files removed (merged /usr
aliases respected), dangling links, trimming, the Python version and the image config."""

from __future__ import annotations

import os
import textwrap
from datetime import datetime
from pathlib import Path

import pytest

from release import image, project
from release.image import Package

MULTIARCH = "usr/lib/x86_64-linux-gnu"

#: Written as dpkg writes it. python3.13's Depends is continued over several lines; zlib1g is
#: reached only through a Pre-Depends, gcc-14-base only as ``gcc-14-base:any (= ...)``, tzdata
#: only on a continuation line, media-types only as the first of two alternatives.
STATUS = """\
Package: python3
Status: install ok installed
Priority: optional
Architecture: amd64
Version: 3.13.5-1
Depends: python3.13 (>= 3.13.5-1~), libpython3-stdlib (= 3.13.5-1)
Description: interactive high-level object-oriented language (default version)
 Python, the high-level, interactive object oriented language,
 .
 Depends: not-a-field (a description line that looks like one)

Package: python3.13
Status: install ok installed
Architecture: amd64
Version: 3.13.5-2
Depends: python3.13-minimal (= 3.13.5-2),
 libpython3.13-stdlib (= 3.13.5-2),
 media-types | mailcap,
 tzdata
Description: Interactive high-level object-oriented language (version 3.13)

Package: python3.13-minimal
Status: install ok installed
Architecture: amd64
Version: 3.13.5-2
Pre-Depends: libc6 (>= 2.38), zlib1g (>= 1:1.2.0)
Depends: libpython3.13-minimal (= 3.13.5-2), libexpat1 (>= 2.6.0)
Description: Minimal subset of the Python language (version 3.13)

Package: libpython3-stdlib
Status: install ok installed
Architecture: amd64
Version: 3.13.5-1
Depends: libpython3.13-stdlib (>= 3.13.5-1~)
Description: interactive high-level object-oriented language (default python3 version)

Package: libpython3.13-stdlib
Status: install ok installed
Architecture: amd64
Version: 3.13.5-2
Depends: libpython3.13-minimal (= 3.13.5-2), libc6 (>= 2.38)
Description: Interactive high-level object-oriented language (standard library)

Package: libpython3.13-minimal
Status: install ok installed
Architecture: amd64
Version: 3.13.5-2
Depends: libc6 (>= 2.38)
Description: Minimal subset of the Python language

Package: libc6
Status: install ok installed
Architecture: amd64
Version: 2.41-12
Depends: libgcc-s1
Description: GNU C Library: Shared libraries
 Contains the standard libraries that are used by nearly all programs on
 the system.

Package: libgcc-s1
Status: install ok installed
Architecture: amd64
Version: 14.2.0-19
Depends: gcc-14-base:any (= 14.2.0-19), libc6 (>= 2.35)
Description: GCC support library

Package: gcc-14-base
Status: install ok installed
Architecture: amd64
Version: 14.2.0-19
Description: GCC, the GNU Compiler Collection (base package)

Package: zlib1g
Status: install ok installed
Architecture: amd64
Version: 1:1.3.dfsg+really1.3.1-1+b1
Depends: libc6 (>= 2.14)
Description: compression library - runtime

Package: libexpat1
Status: install ok installed
Architecture: amd64
Version: 2.7.1-2
Depends: libc6 (>= 2.25)
Description: XML parsing C library - runtime library

Package: media-types
Status: install ok installed
Architecture: all
Version: 13.0.0
Description: List of standard media types and their usual file extension

Package: mailcap
Status: install ok installed
Architecture: all
Version: 3.74
Depends: media-types, perl:any
Description: Debian's mailcap system, and support programs

Package: tzdata
Status: install ok installed
Architecture: all
Version: 2025b-4
Depends: debconf (>= 0.5) | debconf-2.0
Description: time zone and daylight-saving time data

Package: ca-certificates
Status: install ok installed
Architecture: all
Version: 20250419
Depends: openssl (>= 1.1.1), debconf (>= 0.5) | debconf-2.0, libnotthere1
Description: Common CA certificates

Package: openssl
Status: install ok installed
Architecture: amd64
Version: 3.5.1-1
Depends: libssl3t64 (>= 3.5.0), libc6 (>= 2.34)
Description: Secure Sockets Layer toolkit - cryptographic utility

Package: libssl3t64
Status: install ok installed
Architecture: amd64
Version: 3.5.1-1
Depends: libc6 (>= 2.34)
Description: Secure Sockets Layer toolkit - shared libraries

Package: debconf
Status: install ok installed
Architecture: all
Version: 1.5.91
Pre-Depends: perl-base (>= 5.20.1-3~)
Description: Debian configuration management system

Package: perl-base
Status: install ok installed
Architecture: amd64
Version: 5.40.1-6
Pre-Depends: libc6 (>= 2.38), libcrypt1 (>= 1:4.1.0)
Description: minimal Perl system

Package: libcrypt1
Status: install ok installed
Architecture: amd64
Version: 1:4.4.38-1
Depends: libc6 (>= 2.36)
Description: libcrypt shared library

Package: dpkg
Status: install ok installed
Architecture: amd64
Version: 1.22.21
Pre-Depends: tar (>= 1.28-1)
Depends: libzstd1 (>= 1.5.5)
Description: Debian package management system

Package: tar
Status: install ok installed
Architecture: amd64
Version: 1.35+dfsg-3.1
Pre-Depends: libc6 (>= 2.38)
Description: GNU version of the tar archiving utility

Package: libzstd1
Status: install ok installed
Architecture: amd64
Version: 1.5.7+dfsg-1
Depends: libc6 (>= 2.14)
Description: fast lossless compression algorithm

Package: mawk
Status: install ok installed
Architecture: amd64
Version: 1.3.4.20250131-1
Pre-Depends: libc6 (>= 2.38)
Provides: awk
Description: Pattern scanning and text processing language
"""

WANTED = ("python3", "ca-certificates")
#: What WANTED needs at run time in STATUS, worked out by hand.
CLOSURE = {"python3", "python3.13", "python3.13-minimal", "libpython3-stdlib",
           "libpython3.13-stdlib", "libpython3.13-minimal", "libc6", "libgcc-s1",
           "gcc-14-base", "zlib1g", "libexpat1", "media-types", "tzdata", "ca-certificates"}


def write_status(root: Path, text: str = STATUS) -> None:
    (root / "var/lib/dpkg/info").mkdir(parents=True, exist_ok=True)
    (root / "var/lib/dpkg/status").write_text(text)


def by_name(packages: list[Package]) -> dict[str, Package]:
    return {p.name: p for p in packages}


# -- read_status -----------------------------------------------------------------------------


def test_read_status_every_package_in_order(tmp_path: Path) -> None:
    write_status(tmp_path)
    names = [p.name for p in image.read_status(tmp_path)]
    assert names[:3] == ["python3", "python3.13", "python3.13-minimal"]
    assert names[-1] == "mawk"
    assert len(names) == STATUS.count("\nPackage: ") + 1


def test_read_status_dependencies(tmp_path: Path) -> None:
    write_status(tmp_path)
    found = by_name(image.read_status(tmp_path))
    # versions dropped; continuation lines read; the first alternative taken
    assert found["python3.13"].needs == ("python3.13-minimal", "libpython3.13-stdlib",
                                         "media-types", "tzdata")
    # Pre-Depends before Depends
    assert found["python3.13-minimal"].needs == ("libc6", "zlib1g", "libpython3.13-minimal",
                                                 "libexpat1")
    # an architecture qualifier dropped
    assert found["libgcc-s1"].needs == ("gcc-14-base", "libc6")
    assert found["mailcap"].needs == ("media-types", "perl")
    assert found["tzdata"].needs == ("debconf",)
    # a description line that looks like a field is not one
    assert found["python3"].needs == ("python3.13", "libpython3-stdlib")
    assert found["gcc-14-base"].needs == ()


def test_read_status_keeps_each_stanza_verbatim(tmp_path: Path) -> None:
    write_status(tmp_path)
    packages = image.read_status(tmp_path)
    assert "\n\n".join(p.stanza for p in packages) == STATUS.strip()
    assert by_name(packages)["libc6"].stanza.endswith(" the system.")


def test_read_status_tolerates_extra_blank_lines_at_the_end(tmp_path: Path) -> None:
    write_status(tmp_path, STATUS + "\n\n")
    assert image.read_status(tmp_path)[-1].name == "mawk"


# -- needed ----------------------------------------------------------------------------------


def test_needed_is_the_run_time_closure(tmp_path: Path) -> None:
    write_status(tmp_path)
    assert image.needed(image.read_status(tmp_path), WANTED) == CLOSURE


def test_needed_does_not_follow_install_time_packages(tmp_path: Path) -> None:
    write_status(tmp_path)
    keep = image.needed(image.read_status(tmp_path), WANTED)
    # debconf (tzdata, ca-certificates), openssl (ca-certificates) and what only they need
    assert {"debconf", "perl-base", "libcrypt1", "openssl", "libssl3t64"}.isdisjoint(keep)
    assert {"dpkg", "tar", "libzstd1", "mawk", "mailcap"}.isdisjoint(keep)
    assert {"dpkg", "debconf", "perl-base", "openssl"} <= image.INSTALL_TIME


def test_needed_ignores_virtual_and_missing_names(tmp_path: Path) -> None:
    write_status(tmp_path)
    packages = image.read_status(tmp_path)
    keep = image.needed(packages, [*WANTED, "awk", "no-such-package"])
    assert keep == CLOSURE  # libnotthere1 (a Depends), awk (virtual), the missing name
    assert image.needed(packages, ["awk"]) == set()


def test_needed_follows_a_package_once_in_a_cycle(tmp_path: Path) -> None:
    write_status(tmp_path)
    assert image.needed(image.read_status(tmp_path), ["libgcc-s1"]) == {
        "libgcc-s1", "libc6", "gcc-14-base"}


def test_needed_follows_a_package_only_install_time_ones_need_when_wanted(
        tmp_path: Path) -> None:
    write_status(tmp_path)
    packages = image.read_status(tmp_path)
    assert "libssl3t64" in image.needed(packages, [*WANTED, "libssl3t64"])


# -- remove_packages -------------------------------------------------------------------------


def merged_usr_root(root: Path) -> list[Package]:
    """A merged-/usr root: /lib is a link to usr/lib. ``old`` (removed) lists its library
    under /lib, ``new`` (kept) lists the same file under /usr/lib."""
    status = textwrap.dedent("""\
        Package: new
        Status: install ok installed
        Depends: libc6

        Package: old
        Status: install ok installed
        Description: the package being removed
         over two lines

        Package: libc6
        Status: install ok installed
        Description: kept

        Package: gone2
        Status: install ok installed
        Architecture: amd64
        """)
    write_status(root, status)
    (root / MULTIARCH).mkdir(parents=True)
    (root / "lib").symlink_to("usr/lib")
    (root / "etc").mkdir()
    (root / "usr/share/doc").mkdir(parents=True)
    files = {
        "new": ["/.", "/usr", "/usr/lib", f"/{MULTIARCH}", f"/{MULTIARCH}/libfoo.so",
                "/usr/share", "/usr/share/doc", "/usr/share/doc/new",
                "/usr/share/doc/new/copyright"],
        "old": ["/.", "/lib", "/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu/libfoo.so",
                "/lib/x86_64-linux-gnu/libold.so.1", "/usr", "/usr/share",
                "/usr/share/old", "/usr/share/old/data", "/usr/share/old/data/table",
                "/usr/share/doc", "/usr/share/doc/old", "/usr/share/doc/old/copyright",
                "/etc", "/etc/old.conf"],
        "libc6": ["/.", "/etc", "/etc/ld.so.conf", "/lib", "/lib/x86_64-linux-gnu",
                  "/lib/x86_64-linux-gnu/libc.so.6"],
        "gone2": ["/.", "/usr", "/usr/bin", "/usr/bin/gone2"],
    }
    for package, listed in files.items():
        suffix = ":amd64" if package == "gone2" else ""
        info = root / "var/lib/dpkg/info"
        (info / f"{package}{suffix}.list").write_text("".join(f"{x}\n" for x in listed))
        (info / f"{package}{suffix}.md5sums").write_text("0 x\n")
        for path in listed:
            target = root / path.lstrip("/")
            if "." in target.name or target.name in ("table", "copyright", "gone2"):
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(f"{package}\n")
            else:
                target.mkdir(parents=True, exist_ok=True)
    (root / "var/lib/dpkg/info/old.postinst").write_text("#!/bin/sh\n")
    return image.read_status(root)


def test_remove_packages_deletes_only_the_removed_packages_files(tmp_path: Path) -> None:
    packages = merged_usr_root(tmp_path)
    image.remove_packages(tmp_path, {"old", "gone2"}, packages)
    assert not (tmp_path / MULTIARCH / "libold.so.1").exists()
    assert not (tmp_path / "etc/old.conf").exists()
    assert not (tmp_path / "usr/bin/gone2").exists()
    assert (tmp_path / MULTIARCH / "libc.so.6").read_text() == "libc6\n"
    assert (tmp_path / "etc/ld.so.conf").exists()
    assert (tmp_path / "usr/share/doc/new/copyright").exists()


def test_remove_packages_keeps_a_file_a_kept_package_lists_under_another_path(
        tmp_path: Path) -> None:
    packages = merged_usr_root(tmp_path)
    image.remove_packages(tmp_path, {"old"}, packages)
    # old listed /lib/x86_64-linux-gnu/libfoo.so, new /usr/lib/...: one file, still needed
    assert (tmp_path / MULTIARCH / "libfoo.so").exists()
    assert (tmp_path / "lib/x86_64-linux-gnu/libfoo.so").exists()


def test_remove_packages_deletes_a_file_listed_under_an_alias_when_nobody_keeps_it(
        tmp_path: Path) -> None:
    packages = merged_usr_root(tmp_path)
    image.remove_packages(tmp_path, {"old", "new"}, packages)
    assert not (tmp_path / MULTIARCH / "libfoo.so").exists()
    assert (tmp_path / MULTIARCH).is_dir()  # libc6 still has a file there


def test_remove_packages_removes_emptied_directories_only(tmp_path: Path) -> None:
    packages = merged_usr_root(tmp_path)
    (tmp_path / "usr/share/doc/old/local-note").write_text("not dpkg's\n")
    image.remove_packages(tmp_path, {"old", "gone2"}, packages)
    assert not (tmp_path / "usr/share/old").exists()  # data/ emptied first, then old/
    assert not (tmp_path / "usr/bin").exists()
    # a directory with a file no package lists stays, and so do the shared ones
    assert (tmp_path / "usr/share/doc/old/local-note").exists()
    assert (tmp_path / "usr/share/doc").is_dir()
    assert (tmp_path / "etc").is_dir()
    assert (tmp_path / MULTIARCH).is_dir()
    assert tmp_path.is_dir()


def test_remove_packages_drops_the_status_stanzas_and_info_files(tmp_path: Path) -> None:
    packages = merged_usr_root(tmp_path)
    image.remove_packages(tmp_path, {"old", "gone2"}, packages)
    after = image.read_status(tmp_path)
    assert [p.name for p in after] == ["new", "libc6"]
    assert [p.stanza for p in after] == [p.stanza for p in packages
                                         if p.name in ("new", "libc6")]
    info = sorted(p.name for p in (tmp_path / "var/lib/dpkg/info").iterdir())
    assert info == ["libc6.list", "libc6.md5sums", "new.list", "new.md5sums"]


def test_remove_packages_refuses_a_path_that_leaves_the_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    packages = merged_usr_root(root)
    (root / "escape").symlink_to(tmp_path)
    (root / "var/lib/dpkg/info/old.list").write_text("/escape/victim\n")
    (tmp_path / "victim").write_text("outside\n")
    with pytest.raises(SystemExit, match="leaves the root"):
        image.remove_packages(root, {"old"}, packages)
    assert (tmp_path / "victim").exists()


def test_remove_packages_keeps_the_merged_usr_link_a_removed_package_lists(
        tmp_path: Path) -> None:
    packages = [p for p in merged_usr_root(tmp_path) if p.name != "libc6"]
    (tmp_path / "var/lib/dpkg/info/libc6.list").unlink()
    image.remove_packages(tmp_path, {"old"}, packages)
    # dpkg lists /lib as old's directory; like dpkg, a directory goes only when empty, and
    # /lib is the merged-/usr alias, which new's files (under /usr/lib) are still reached by
    assert (tmp_path / "lib").is_symlink()


def test_remove_packages_spares_info_files_of_a_kept_package_with_a_dotted_name(
        tmp_path: Path) -> None:
    write_status(tmp_path, "Package: python3\n\nPackage: python3.13\n")
    info = tmp_path / "var/lib/dpkg/info"
    (info / "python3.list").write_text("")
    (info / "python3.13.list").write_text("")
    image.remove_packages(tmp_path, {"python3"}, image.read_status(tmp_path))
    assert sorted(p.name for p in info.iterdir()) == ["python3.13.list"]


# -- remove_dangling_links -------------------------------------------------------------------


def links_root(root: Path) -> Path:
    (root / MULTIARCH).mkdir(parents=True)
    (root / "lib").symlink_to("usr/lib")
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/python3.13").write_text("python\n")
    (root / MULTIARCH / "libfoo.so.1").write_text("lib\n")
    links = {
        "usr/bin/python3": "python3.13",                      # relative, good
        "usr/bin/py-abs": "/usr/bin/python3.13",              # absolute, good in the root
        "usr/bin/via-alias": "/lib/x86_64-linux-gnu/libfoo.so.1",  # through /lib, good
        f"{MULTIARCH}/libfoo.so": "libfoo.so.1",              # relative, good
        "usr/bin/up": "../lib/x86_64-linux-gnu/libfoo.so.1",  # relative with .., good
        "usr/bin/gone-rel": "python3.12",                     # relative, dangling
        "usr/bin/gone-abs": "/usr/bin/perl5.40",              # absolute, dangling
        "usr/bin/host-only": "/bin/sh",                       # the host has it, the root not
        f"{MULTIARCH}/gone-dir/x": "../../nowhere",           # in a subdirectory, dangling
    }
    for name, target in links.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).symlink_to(target)
    return root


def test_remove_dangling_links_removes_dangling_absolute_and_relative_links(
        tmp_path: Path) -> None:
    root = links_root(tmp_path)
    assert Path("/bin/sh").exists()
    image.remove_dangling_links(root)
    for name in ("usr/bin/gone-rel", "usr/bin/gone-abs", "usr/bin/host-only",
                 f"{MULTIARCH}/gone-dir/x"):
        assert not os.path.lexists(root / name), name


def test_remove_dangling_links_keeps_good_links(tmp_path: Path) -> None:
    root = links_root(tmp_path)
    image.remove_dangling_links(root)
    for name, target in (("usr/bin/python3", "python3.13"),
                         ("usr/bin/py-abs", "/usr/bin/python3.13"),
                         ("usr/bin/via-alias", "/lib/x86_64-linux-gnu/libfoo.so.1"),
                         (f"{MULTIARCH}/libfoo.so", "libfoo.so.1"),
                         ("usr/bin/up", "../lib/x86_64-linux-gnu/libfoo.so.1"),
                         ("lib", "usr/lib")):
        assert os.readlink(root / name) == target, name
    assert (root / "usr/bin/python3.13").read_text() == "python\n"


def test_remove_dangling_links_keeps_a_good_alternatives_chain(tmp_path: Path) -> None:
    # /usr/bin/awk -> /etc/alternatives/awk -> /usr/bin/sunk-test-mawk: all in the root
    (tmp_path / "etc/alternatives").mkdir(parents=True)
    (tmp_path / "usr/bin").mkdir(parents=True)
    (tmp_path / "usr/bin/sunk-test-mawk").write_text("mawk\n")
    (tmp_path / "etc/alternatives/awk").symlink_to("/usr/bin/sunk-test-mawk")
    (tmp_path / "usr/bin/awk").symlink_to("/etc/alternatives/awk")
    assert not Path("/usr/bin/sunk-test-mawk").exists()
    image.remove_dangling_links(tmp_path)
    assert (tmp_path / "usr/bin/awk").is_symlink()


def test_remove_dangling_links_removes_a_dangling_chain(tmp_path: Path) -> None:
    # a-link -> /etc/alternatives/z-target -> /bin/sh, which the host has and the root not
    alternatives = tmp_path / "etc/alternatives"
    alternatives.mkdir(parents=True)
    (alternatives / "z-target").symlink_to("/bin/sh")
    (alternatives / "a-link").symlink_to("/etc/alternatives/z-target")
    image.remove_dangling_links(tmp_path)
    assert not os.path.lexists(alternatives / "z-target")
    assert not os.path.lexists(alternatives / "a-link")


# -- trim ------------------------------------------------------------------------------------


def test_trim_keeps_copyright_files_and_removes_docs_caches_and_bytecode(
        tmp_path: Path) -> None:
    for rel in ("usr/share/doc/libc6/copyright", "usr/share/doc/libc6/changelog.gz",
                "usr/share/doc/python3/README.gz", "usr/share/man/man1/python3.1.gz",
                "var/cache/ldconfig/aux-cache", "var/lib/dpkg/available", "etc/shadow",
                "var/lib/dpkg/status", "usr/lib/python3.13/__pycache__/os.cpython-313.pyc",
                "usr/lib/python3.13/os.py", "etc/passwd"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x\n")
    (tmp_path / "usr/share/doc/libfoo1").symlink_to("libc6")
    image.trim(tmp_path)
    assert (tmp_path / "usr/share/doc/libc6/copyright").exists()
    assert not (tmp_path / "usr/share/doc/libc6/changelog.gz").exists()
    assert not (tmp_path / "usr/share/doc/python3").exists()
    assert not os.path.lexists(tmp_path / "usr/share/doc/libfoo1")
    for gone in ("usr/share/man", "var/cache", "var/lib/dpkg/available", "etc/shadow",
                 "usr/lib/python3.13/__pycache__"):
        assert not (tmp_path / gone).exists(), gone
    for kept in ("var/lib/dpkg/status", "usr/lib/python3.13/os.py", "etc/passwd"):
        assert (tmp_path / kept).exists(), kept


# -- python_version and image_config ---------------------------------------------------------


def test_python_version_reads_the_python3_link(tmp_path: Path) -> None:
    (tmp_path / "usr/bin").mkdir(parents=True)
    (tmp_path / "usr/bin/python3").symlink_to("python3.13")
    assert image.python_version(tmp_path) == "3.13"
    (tmp_path / "usr/bin/python3").unlink()
    (tmp_path / "usr/bin/python3").symlink_to("python3.14")
    assert image.python_version(tmp_path) == "3.14"


def test_python_version_refuses_a_link_it_cannot_read(tmp_path: Path) -> None:
    (tmp_path / "usr/bin").mkdir(parents=True)
    (tmp_path / "usr/bin/python3").symlink_to("pypy3")
    with pytest.raises(SystemExit, match="Python version"):
        image.python_version(tmp_path)


@pytest.mark.parametrize("epoch", [0, 1_700_000_000, 1_767_225_599])
def test_image_config(epoch: int) -> None:
    config = image.image_config(epoch)
    inner = config["config"]
    assert isinstance(inner, dict)
    assert inner["User"] == "65532:65532"
    assert inner["User"] == f"{image.UID}:{image.UID}"
    assert inner["Entrypoint"] == ["/usr/local/bin/sunk-scheduler"]
    assert "Cmd" not in inner
    created = config["created"]
    assert isinstance(created, str)
    assert created.endswith("Z")
    parsed = datetime.fromisoformat(created.replace("Z", "+00:00"))
    assert parsed.utcoffset() is not None
    assert parsed.timestamp() == epoch
    assert inner["Labels"]["org.opencontainers.image.created"] == created
    assert inner["Labels"]["org.opencontainers.image.version"] == project.version()
    assert config["history"] == [{"created": created,
                                  "created_by": "make image (release/image.py)"}]
    assert (config["architecture"], config["os"]) == ("amd64", "linux")
    assert set(inner["ExposedPorts"]) == {f"{p}/tcp" for p in image.PORTS}


def test_image_config_is_a_function_of_the_epoch() -> None:
    assert image.image_config(1_700_000_000) == image.image_config(1_700_000_000)
    assert image.image_config(1_700_000_000) != image.image_config(1_700_000_001)
