"""One version everywhere, and lock files that say what pyproject.toml asks for.

- ``charts/sunk/Chart.yaml``'s ``version`` and ``appVersion`` are the project's;
- ``requirements.lock`` (the image's, installed with ``--no-deps``) and
  ``requirements-dev.lock`` (CI's) pin, with hashes, versions that satisfy pyproject.toml's
  requirements, every dependency of what they pin, and the runtime lock nothing only the
  ``dev`` extra needs.
"""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

from release import project

REPO = Path(__file__).resolve().parents[3]
RUNTIME_LOCK = REPO / "requirements.lock"
DEV_LOCK = REPO / "requirements-dev.lock"
#: uv's "via" comment for a requirement pyproject.toml states itself.
ROOT = "sunk (pyproject.toml)"


def environment(python: str) -> dict[str, str]:
    """Marker variables of CPython ``python`` on x86-64 Linux: CI's (3.11) and the image's
    Debian Python (3.13)."""
    return {"python_version": python, "python_full_version": f"{python}.0",
            "implementation_name": "cpython", "implementation_version": f"{python}.0",
            "platform_python_implementation": "CPython", "platform_system": "Linux",
            "platform_machine": "x86_64", "sys_platform": "linux", "os_name": "posix",
            "platform_release": "", "platform_version": "", "extra": ""}


PYTHONS = ("3.11", "3.13")


def applies(marker: Marker | None, python: str, extra: str = "") -> bool:
    return marker is None or marker.evaluate({**environment(python), "extra": extra})


@dataclass(frozen=True)
class Pin:
    name: NormalizedName
    version: Version
    marker: Marker | None
    hashes: tuple[str, ...]
    #: The names in the lock's ``# via`` comment (ROOT for pyproject.toml itself).
    via: tuple[str, ...]


def read_lock(path: Path) -> dict[NormalizedName, Pin]:
    """A ``uv pip compile --generate-hashes`` file: each pin, its hashes and its ``via``."""
    entries: list[tuple[str, list[str]]] = []
    logical = ""
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            assert not logical, f"{path.name}: a comment inside a continued line: {line!r}"
            parent = stripped.removeprefix("#").strip()
            if parent.startswith("via"):
                parent = parent.removeprefix("via").strip()
            if parent and entries:
                entries[-1][1].append(parent)
            continue
        if not stripped and not logical:
            continue
        logical += " " + stripped.removesuffix("\\")
        if not stripped.endswith("\\"):
            entries.append((logical.strip(), []))
            logical = ""
    assert not logical, f"{path.name} ends inside a continued line"
    pins: dict[NormalizedName, Pin] = {}
    for text, via in entries:
        requirement_text, *options = re.split(r"\s+(?=--)", text)
        assert all(o.startswith("--hash=") for o in options), text
        requirement = Requirement(requirement_text)
        (spec,) = requirement.specifier
        assert spec.operator == "==" and "*" not in spec.version, text
        assert not requirement.extras and requirement.url is None, text
        name = canonicalize_name(requirement.name)
        assert name not in pins, f"{path.name} pins {name} twice"
        pins[name] = Pin(name, Version(spec.version), requirement.marker,
                         tuple(o.removeprefix("--hash=") for o in options), tuple(via))
    return pins


def pyproject() -> dict[str, Any]:
    with (REPO / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)


def requirements(extra: str | None = None) -> list[Requirement]:
    project_table = pyproject()["project"]
    listed = (project_table["dependencies"] if extra is None
              else project_table["optional-dependencies"][extra])
    return [Requirement(x) for x in listed]


@pytest.fixture(scope="module")
def runtime_lock() -> dict[NormalizedName, Pin]:
    return read_lock(RUNTIME_LOCK)


@pytest.fixture(scope="module")
def dev_lock() -> dict[NormalizedName, Pin]:
    return read_lock(DEV_LOCK)


# -- one version -----------------------------------------------------------------------------


def test_chart_version_and_app_version_are_the_projects() -> None:
    chart = yaml.safe_load((REPO / "charts/sunk/Chart.yaml").read_text())
    assert chart["version"] == project.version()
    assert chart["appVersion"] == project.version()
    assert isinstance(chart["appVersion"], str)  # quoted: 1.10 must not become 1.1


def test_project_version_is_pyprojects_and_a_valid_version() -> None:
    assert project.version() == pyproject()["project"]["version"]
    assert str(Version(project.version())) == project.version()


# -- the locks -------------------------------------------------------------------------------


def test_lock_reader_reads_every_pin(runtime_lock: dict[NormalizedName, Pin],
                                     dev_lock: dict[NormalizedName, Pin]) -> None:
    # the reader itself: as many pins as lines of the form name==version
    for path, pins in ((RUNTIME_LOCK, runtime_lock), (DEV_LOCK, dev_lock)):
        count = len(re.findall(r"^[A-Za-z0-9][^\s=]*==", path.read_text(), re.M))
        assert len(pins) == count > 0, path.name


@pytest.mark.parametrize("python", PYTHONS)
def test_runtime_dependencies_satisfied_by_the_runtime_lock(
        runtime_lock: dict[NormalizedName, Pin], python: str) -> None:
    check_satisfied(requirements(), runtime_lock, python)


@pytest.mark.parametrize("python", PYTHONS[:1])
def test_runtime_and_dev_dependencies_satisfied_by_the_dev_lock(
        dev_lock: dict[NormalizedName, Pin], python: str) -> None:
    check_satisfied([*requirements(), *requirements("dev")], dev_lock, python)


def check_satisfied(wanted: list[Requirement], pins: dict[NormalizedName, Pin],
                    python: str) -> None:
    assert wanted
    for requirement in wanted:
        if not applies(requirement.marker, python):
            continue
        pin = pins.get(canonicalize_name(requirement.name))
        assert pin is not None, f"{requirement} is not locked"
        assert applies(pin.marker, python), f"{requirement}: pinned only for {pin.marker}"
        assert requirement.specifier.contains(pin.version, prereleases=True), \
            f"{requirement} not satisfied by {pin.name}=={pin.version}"


@pytest.mark.parametrize("lock", [RUNTIME_LOCK, DEV_LOCK], ids=lambda p: p.name)
def test_every_pin_has_a_sha256_hash(lock: Path) -> None:
    for pin in read_lock(lock).values():
        assert pin.hashes, f"{lock.name}: {pin.name} has no hash"
        for h in pin.hashes:
            assert re.fullmatch(r"sha256:[0-9a-f]{64}", h), f"{lock.name}: {pin.name}: {h}"
        assert len(set(pin.hashes)) == len(pin.hashes), f"{lock.name}: {pin.name}"


def runtime_closure(dev_lock: dict[NormalizedName, Pin]) -> set[NormalizedName]:
    """What pyproject.toml's runtime dependencies need, by the dev lock's ``via`` comments."""
    children: dict[str, set[NormalizedName]] = {}
    for pin in dev_lock.values():
        for parent in pin.via:
            children.setdefault(parent if parent == ROOT else canonicalize_name(parent),
                                set()).add(pin.name)
    todo = [canonicalize_name(r.name) for r in requirements()]
    found: set[NormalizedName] = set()
    while todo:
        name = todo.pop()
        if name not in found:
            found.add(name)
            todo.extend(children.get(name, ()))
    return found


def test_runtime_lock_is_exactly_what_the_runtime_needs(
        runtime_lock: dict[NormalizedName, Pin], dev_lock: dict[NormalizedName, Pin]) -> None:
    closure = runtime_closure(dev_lock)
    assert set(runtime_lock) - closure == set(), "pinned for the image but only dev needs it"
    assert closure - set(runtime_lock) == set(), "the runtime needs it but the image lacks it"


def test_runtime_lock_has_no_dev_tools(runtime_lock: dict[NormalizedName, Pin],
                                       dev_lock: dict[NormalizedName, Pin]) -> None:
    dev_only = {canonicalize_name(r.name) for r in requirements("dev")} \
        - runtime_closure(dev_lock)
    assert {"pytest", "mypy", "ruff", "uv", "hypothesis", "playwright"} <= dev_only
    assert dev_only & set(runtime_lock) == set()
    assert "cryptography" not in dev_only  # a dev extra kr8s needs as well: it stays


def test_both_locks_pin_the_same_versions(runtime_lock: dict[NormalizedName, Pin],
                                          dev_lock: dict[NormalizedName, Pin]) -> None:
    # the image runs what CI tested
    assert set(runtime_lock) <= set(dev_lock)
    for name, pin in runtime_lock.items():
        other = dev_lock[name]
        assert (pin.version, pin.marker, set(pin.hashes)) == \
            (other.version, other.marker, set(other.hashes)), name


@pytest.mark.parametrize(("lock", "python"), [(RUNTIME_LOCK, "3.11"), (RUNTIME_LOCK, "3.13"),
                                              (DEV_LOCK, "3.11")],
                         ids=lambda x: x.name if isinstance(x, Path) else x)
def test_every_dependency_of_a_pinned_package_is_pinned(lock: Path, python: str) -> None:
    """The image installs with ``--no-deps``: what a pinned package requires (its installed
    metadata, which is the same version: the venv is installed from the dev lock) must be
    pinned too, in a version it accepts."""
    pins = read_lock(lock)
    todo = [(name, frozenset[str]()) for name, pin in pins.items() if applies(pin.marker, python)]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, extras = todo.pop()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            installed = None
        if installed is None or Version(installed) != pins[canonicalize_name(name)].version:
            pytest.skip(f"the venv has {name} {installed}, not the lock's: make reinstall")
        for text in importlib.metadata.requires(name) or []:
            requirement = Requirement(text)
            if not any(applies(requirement.marker, python, e) for e in {"", *extras}):
                continue
            dep = canonicalize_name(requirement.name)
            assert dep in pins, f"{lock.name}: {name} requires {requirement}, not pinned"
            assert applies(pins[dep].marker, python), f"{lock.name}: {dep} {pins[dep].marker}"
            assert requirement.specifier.contains(pins[dep].version, prereleases=True), \
                f"{lock.name}: {name} requires {requirement}, pinned {pins[dep].version}"
            todo.append((dep, frozenset(requirement.extras)))
