"""A cached chroot is used only if it was built with today's package list."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed import build, procs
from testbed.errors import TestbedError


@pytest.fixture
def debootstraps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Every debootstrap build_chroot would run; each "builds" an empty tree."""
    monkeypatch.setenv("SUNK_TESTBED_CACHE", str(tmp_path))
    monkeypatch.setattr(build, "ensure_host_packages", lambda *_: None)
    monkeypatch.setattr(build, "debian_mirror", lambda: "http://mirror.invalid/debian")
    runs: list[list[str]] = []

    def run(cmd: list[str], **_: object) -> None:
        runs.append(cmd)
        (Path(cmd[-2]) / "etc").mkdir(parents=True)

    monkeypatch.setattr(build, "_run", run)
    return runs


def test_a_chroot_stamped_with_todays_packages_is_reused(debootstraps: list[list[str]]) -> None:
    first = build.build_chroot("trixie")
    assert build.build_chroot("trixie") == first
    assert len(debootstraps) == 1
    packages = debootstraps[0][2].removeprefix("--include=").split(",")
    assert {"mariadb-server", "slurmdbd", "slurmctld"} <= set(packages)
    assert (first / "etc/slurm").readlink() == Path("/run/slurm/etc")


def test_a_chroot_built_before_accounting_is_rebuilt(debootstraps: list[list[str]]) -> None:
    old = build.cache_root() / "chroot-trixie"
    old.mkdir(parents=True)
    (old / "left-from-before").touch()
    (old / ".sunk-ready").write_text("trixie\n")  # what the stamp was before it named packages
    root = build.build_chroot("trixie")
    assert len(debootstraps) == 1
    assert not (root / "left-from-before").exists()
    assert (root / ".sunk-ready").read_text() == build.chroot_stamp("trixie")


def test_a_chroot_in_use_is_never_deleted(debootstraps: list[list[str]],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    old = build.cache_root() / "chroot-trixie"
    old.mkdir(parents=True)
    (old / ".sunk-ready").write_text("trixie\n")
    monkeypatch.setattr(procs, "mounts_under", lambda root: [str(root / "dev")])
    with pytest.raises(TestbedError, match="a test bed uses it"):
        build.build_chroot("trixie")
    assert debootstraps == [] and old.exists()
