"""The layers are enforced: `make lint` (lint-imports) fails when a module breaks a contract.

Each case copies the product's packages and pyproject.toml to a scratch directory, adds one
import that a contract forbids, and runs lint-imports there."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=tree, env=env, text=True,
                          capture_output=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def clean_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tree = tmp_path_factory.mktemp("layers")
    for package in ("sunk", "web"):
        shutil.copytree(ROOT / package, tree / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    return tree


def test_the_product_keeps_every_contract(clean_tree: Path) -> None:
    result = lint(clean_tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(("module", "line", "contract"), [
    ("sunk/plans/decide.py", "import httpx", "Pure packages"),
    ("sunk/plans/podplan.py", "from sunk import kube", "Pure packages"),
    ("sunk/policy/engine.py", "from sunk.apply import executor", "Pure packages"),
    ("sunk/loops/scheduler.py", "import kr8s", "Only the kube package talks to kr8s"),
    ("sunk/loops/syncer.py", "import httpx",
     "Only the kube package and the Slurm client speak HTTP"),
    ("web/app.py", "from sunk.slurm import client", "The dashboard reads"),
    ("sunk/model/cluster.py", "from sunk.loops import scheduler", "Layers"),
    ("sunk/apply/executor.py", "from sunk.hooks import answers", "Layers"),
    ("sunk/model/jobtable.py", "from sunk.model import cluster", "Pure packages"),
    ("sunk/loops/gangreconcile.py", "from sunk.loops import scheduler", "Inside the loops"),
    ("sunk/model/health.py", "from sunk.model import cluster", "Inside the cluster model"),
    ("sunk/slurm/client.py", "from sunk.model import jobtable", "The clients"),
    ("sunk/plans/fit.py", "from sunk.model import nodeindex", "Layers"),
])
def test_a_forbidden_import_breaks_the_lint(clean_tree: Path, tmp_path: Path, module: str,
                                            line: str, contract: str) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(clean_tree, tree)
    path = tree / module
    text = path.read_text()
    # after the module's `from __future__` line, so the file still compiles
    head, sep, rest = text.partition("from __future__ import annotations\n")
    path.write_text(head + sep + line + "  # noqa\n" + rest if sep else line + "\n" + text)
    result = lint(tree)
    assert result.returncode != 0
    broken = [ln for ln in result.stdout.splitlines() if "BROKEN" in ln]
    assert any(contract in ln for ln in broken), result.stdout
