"""docs/how-it-works.md's table of modules names every module under sunk/, and nothing that is
gone.

The granularity: every top-level module ``sunk/X.py`` has its path in the table's first column;
a sub-package (``sunk/kube/``, ``sunk/slurm/``, ``sunk/policy/``) is named either as a whole
(``sunk/kube/``) or by every module in it, at any depth (``sunk/slurm/job.py``, ...). Package
``__init__.py`` files are covered by their package. A path the table names must exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "how-it-works.md"
SUNK = ROOT / "sunk"
HEADER = re.compile(r"\|\s*module\s*\|\s*what\s*\|")
PATH = re.compile(r"`(sunk/[^`\s]*)`")


def table_lines(text: str) -> list[str]:
    """The lines of the module table: from its header to the first line that is not a row."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if HEADER.match(line)]
    assert len(starts) == 1, f"{DOC}: expected one '| module | what | ...' table, found " \
                             f"{len(starts)}"
    rows = []
    for line in lines[starts[0] + 2:]:  # after the header and its |---| line
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


def named(rows: list[str]) -> set[str]:
    """Every ``sunk/...`` path in the first column of a row."""
    found: set[str] = set()
    for row in rows:
        first = row.strip("|").split("|", 1)[0]
        found.update(PATH.findall(first))
    return found


def missing(names: set[str], sunk: Path = SUNK) -> list[str]:
    """The modules (or packages) of ``sunk`` that ``names`` does not cover."""
    out: list[str] = []
    for module in sorted(sunk.glob("*.py")):
        if module.name != "__init__.py" and f"sunk/{module.name}" not in names:
            out.append(f"sunk/{module.name}")
    for package in sorted(p.parent for p in sunk.glob("*/__init__.py")):
        if f"sunk/{package.name}/" in names:
            continue
        for module in sorted(package.rglob("*.py")):
            path = module.relative_to(sunk.parent).as_posix()
            if module.name != "__init__.py" and "__pycache__" not in path and path not in names:
                out.append(path)
    return out


def stale(names: set[str], root: Path = ROOT) -> list[str]:
    """The paths ``names`` holds that do not exist."""
    return sorted(n for n in names if not (root / n).exists()
                  or (n.endswith("/") and not (root / n).is_dir()))


def test_every_module_under_sunk_has_a_row() -> None:
    names = named(table_lines(DOC.read_text(encoding="utf-8")))
    assert missing(names) == [], (
        f"{DOC.relative_to(ROOT)}'s module table misses these: add a row saying what each holds")


def test_every_path_in_the_table_exists() -> None:
    names = named(table_lines(DOC.read_text(encoding="utf-8")))
    assert stale(names) == [], f"{DOC.relative_to(ROOT)}'s module table names what is gone"


# -- the check itself, on a made-up package -------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for path in ("sunk/__init__.py", "sunk/a.py", "sunk/b.py", "sunk/kube/__init__.py",
                 "sunk/kube/client.py", "sunk/policy/__init__.py", "sunk/policy/cel/__init__.py",
                 "sunk/policy/cel/reads.py", "sunk/policy/engine.py"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    return tmp_path


TABLE = """\
Prose with `sunk/elsewhere.py`, which is not in the table.

| module | what | I/O |
|---|---|---|
| `sunk/a.py`, `sunk/b.py` | two modules | none |
| `sunk/kube/` | a package as a whole | yes |
| `sunk/policy/engine.py` | one module of a package | none |
| `web/` | not under sunk/ | reads memory |

After the table: `sunk/policy/cel/reads.py`.
"""


def test_a_module_missing_from_the_table_is_found(tree: Path) -> None:
    names = named(table_lines(TABLE))
    assert names == {"sunk/a.py", "sunk/b.py", "sunk/kube/", "sunk/policy/engine.py"}
    # a package not named as a whole needs every module, at any depth; prose does not count
    assert missing(names, tree / "sunk") == ["sunk/policy/cel/reads.py"]
    (tree / "sunk" / "c.py").write_text("")
    (tree / "sunk" / "kube" / "trim.py").write_text("")  # covered by sunk/kube/
    assert missing(names, tree / "sunk") == ["sunk/c.py", "sunk/policy/cel/reads.py"]
    assert missing(names | {"sunk/c.py", "sunk/policy/"}, tree / "sunk") == []


def test_a_row_for_what_is_gone_is_found(tree: Path) -> None:
    names = named(table_lines(TABLE))
    assert stale(names, tree) == []
    (tree / "sunk" / "b.py").unlink()
    assert stale(names | {"sunk/a.py/"}, tree) == ["sunk/a.py/", "sunk/b.py"]
