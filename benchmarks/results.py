"""A benchmark run's figures, kept as JSON under ``benchmarks/results/`` with what they were
measured on: the command, the date, the machine, the versions and the test bed.

Each scenario writes one record (``benchmarks/results/<scenario>.json``, or the file its
``--json FILE`` names); ``python -m benchmarks.report`` makes docs/benchmarks.md's generated
sections from them::

    from benchmarks import results

    record = results.record("saturate", figures={"sunk_per_s": 14.0, ...},
                            bed={"nodes": 100}, extra_versions={"slurm": "24.11.5"},
                            argv=argv)
    results.save(record, args.json)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from release import project

REPO = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO / "benchmarks" / "results"

#: A scenario's name: a file name (``<scenario>.json``) and a marker in docs/benchmarks.md.
SCENARIO = re.compile(r"[a-z0-9][a-z0-9._-]*")

#: The versions every record carries; callers add others (Slurm, Kubernetes) beside them.
OWN_VERSIONS = ("sunk", "commit")


class Machine(TypedDict):
    cores: int
    cpu_model: str
    memory_gib: float
    python: str
    kernel: str


class Plot(TypedDict):
    title: str
    #: The PNG, relative to the repository's root (``docs/benchmarks/growth-cpu-per-pod.png``).
    path: str


class Record(TypedDict):
    scenario: str
    #: The command line that measured it: ``python -m benchmarks.scheduling --pods 400``.
    command: str
    #: ISO 8601, UTC, to the second: ``2026-11-23T21:54:47Z``.
    date: str
    machine: Machine
    #: ``sunk`` (pyproject.toml), ``commit`` (short, ``+dirty`` with uncommitted changes) and
    #: whatever the caller added (``slurm``, ``kubernetes``).
    versions: dict[str, str]
    #: The test bed as the caller describes it (``{"nodes": 100}``).
    bed: dict[str, Any]
    #: The scenario's own figures: any JSON (no NaN or infinity).
    figures: dict[str, Any]
    #: Plots made from the figures, shown under them in the report.
    plots: NotRequired[list[Plot]]


class ResultsError(Exception):
    """A record that cannot be saved or read: the message says which and why."""


# -- what a run is measured on ---------------------------------------------------------------


def machine_info(cpuinfo: Path = Path("/proc/cpuinfo"),
                 meminfo: Path = Path("/proc/meminfo")) -> Machine:
    """Cores, CPU model, memory, Python and kernel of this machine."""
    model = ""
    with contextlib.suppress(OSError):
        model = next((line.split(":", 1)[1].strip() for line in
                      cpuinfo.read_text().splitlines() if line.startswith("model name")), "")
    memory_kib = 0
    with contextlib.suppress(OSError, ValueError, IndexError):
        memory_kib = next((int(line.split()[1]) for line in meminfo.read_text().splitlines()
                           if line.startswith("MemTotal:")), 0)
    return Machine(cores=os.cpu_count() or 0,
                   cpu_model=model or platform.processor() or platform.machine(),
                   memory_gib=round(memory_kib / 1024**2, 1),
                   python=platform.python_version(),
                   kernel=platform.release())


def describe_machine(info: Machine) -> str:
    """One line: ``2 cores (AMD EPYC 7B13), 23.5 GiB, Python 3.11.7, kernel 6.1.0-28``."""
    return (f"{info['cores']} cores ({info['cpu_model']}), {info['memory_gib']:g} GiB, "
            f"Python {info['python']}, kernel {info['kernel']}")


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True,
                              check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def commit() -> str:
    """The checkout's commit, short, with ``+dirty`` if a tracked file differs from it (as
    ``git describe --dirty``: untracked files, such as results just written, do not count);
    ``unknown`` outside a git checkout."""
    head = _git("rev-parse", "--short", "HEAD")
    if head is None:
        return "unknown"
    changes = _git("status", "--porcelain", "--untracked-files=no")
    return head + ("+dirty" if changes else "")


def versions(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """sunk's version (pyproject.toml), the commit, and ``extra`` (the caller's: ``slurm``,
    ``kubernetes``), which may not redefine the first two."""
    found = {"sunk": project.version(), "commit": commit()}
    for name, value in (extra or {}).items():
        if name in found:
            raise ResultsError(f"version {name!r} is the record's own, not the caller's")
        found[name] = str(value)
    return found


def command(argv: Sequence[str] | None = None, module: str | None = None) -> str:
    """The command line as one would type it: ``python -m <module> <args>``, each argument
    quoted for a POSIX shell. ``argv`` (default ``sys.argv[1:]``) is the arguments without the
    program; ``module`` (default: the one run with ``-m``, else the script's path inside the
    repository) the module."""
    args = list(sys.argv[1:] if argv is None else argv)
    name = module or _main_module()
    return shlex.join(["python", "-m", name, *args])


def _main_module() -> str:
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name:
        return str(spec.name).removesuffix(".__main__")
    script = Path(sys.argv[0]).resolve()
    try:
        parts = list(script.relative_to(REPO).with_suffix("").parts)
    except ValueError:
        return script.stem
    if parts and parts[-1] == "__main__":
        parts.pop()
    return ".".join(parts)


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def record(scenario: str, *, figures: Mapping[str, Any], bed: Mapping[str, Any] | None = None,
           extra_versions: Mapping[str, str] | None = None, argv: Sequence[str] | None = None,
           module: str | None = None, plots: Sequence[Plot] = (),
           date: str | None = None, machine: Machine | None = None) -> Record:
    """A record of this run: the command (:func:`command` of ``argv`` and ``module``), now,
    this machine and the versions, with the caller's test bed, figures and plots."""
    _check_scenario(scenario)
    made = Record(scenario=scenario, command=command(argv, module), date=date or now(),
                  machine=machine or machine_info(), versions=versions(extra_versions),
                  bed=dict(bed or {}), figures=dict(figures))
    if plots:
        made["plots"] = [Plot(title=p["title"], path=p["path"]) for p in plots]
    return made


def plot_entry(title: str, path: Path | str) -> Plot:
    """A :class:`Plot` for a PNG (absolute, or relative to the repository's root)."""
    png = Path(path)
    if png.is_absolute():
        try:
            png = png.resolve().relative_to(REPO)
        except ValueError as exc:
            raise ResultsError(f"{path}: a plot must be inside the repository") from exc
    return Plot(title=title, path=png.as_posix())


# -- files -----------------------------------------------------------------------------------


def _check_scenario(scenario: str) -> None:
    if not SCENARIO.fullmatch(scenario):
        raise ResultsError(f"scenario {scenario!r}: lower-case letters, digits, '.', '_' and "
                           "'-' only (it names a file and a marker)")


def default_path(scenario: str, results_dir: Path | None = None) -> Path:
    """``<results_dir>/<scenario>.json``; by default in the repository's
    ``benchmarks/results/``, wherever the command runs from."""
    _check_scenario(scenario)
    return (RESULTS_DIR if results_dir is None else results_dir) / f"{scenario}.json"


def dumps(rec: Record) -> str:
    """Pretty JSON, keys sorted, a trailing newline: the same record gives the same text."""
    try:
        return json.dumps(rec, indent=2, sort_keys=True, ensure_ascii=False,
                          allow_nan=False) + "\n"
    except (TypeError, ValueError) as exc:
        raise ResultsError(f"{rec.get('scenario')}: not JSON: {exc}") from exc


def save(rec: Record, path: Path | str | None = None) -> Path:
    """Write ``rec`` to ``path`` (default ``benchmarks/results/<scenario>.json`` in the
    repository, wherever the command runs from), replacing the file in one step. Returns the
    path written."""
    _check_scenario(rec["scenario"])
    target = Path(path) if path is not None else default_path(rec["scenario"])
    text = dumps(rec)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


REQUIRED = {"scenario": str, "command": str, "date": str, "machine": dict, "versions": dict,
            "bed": dict, "figures": dict}


def load(path: Path | str) -> Record:
    """One record; :class:`ResultsError` if the file is not one."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ResultsError(f"{path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ResultsError(f"{path}: not a JSON object")
    for key, kind in REQUIRED.items():
        if not isinstance(data.get(key), kind):
            raise ResultsError(f"{path}: {key!r} missing or not a {kind.__name__}")
    if missing := set(Machine.__annotations__) - set(data["machine"]):
        raise ResultsError(f"{path}: 'machine' lacks {', '.join(sorted(missing))}")
    _check_scenario(data["scenario"])
    return data  # type: ignore[return-value]  # checked above, key by key


def load_all(results_dir: Path | str | None = None) -> dict[str, Record]:
    """Every ``*.json`` record in ``results_dir`` by scenario (none if there is no such
    directory); two files of one scenario are an error."""
    found: dict[str, Record] = {}
    where: dict[str, Path] = {}
    directory = RESULTS_DIR if results_dir is None else Path(results_dir)
    if not directory.is_dir():
        return found
    for path in sorted(directory.glob("*.json")):
        rec = load(path)
        name = rec["scenario"]
        if name in found:
            raise ResultsError(f"{path} and {where[name]} are both scenario {name!r}")
        found[name], where[name] = rec, path
    return found


def add_json_argument(parser: argparse.ArgumentParser) -> None:
    """``--json FILE``: where to write the record (default
    ``benchmarks/results/<scenario>.json``)."""
    parser.add_argument("--json", type=Path, metavar="FILE", default=None,
                        help="write the results record here (default: "
                             "benchmarks/results/<scenario>.json in the repository)")
