"""The CEL engine loads only with the cel-python release it was written against, and every
place that installs cel-python installs that one."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from sunk.policy.cel import _pinned

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("installed", ["0.5.1", "0.4.2", "1.0.0", "none"])
def test_another_release_refuses_to_load_saying_which_is_needed(installed: str) -> None:
    with pytest.raises(_pinned.WrongCelPython) as refused:
        _pinned.check(installed)
    assert f"cel-python=={_pinned.CEL_PYTHON}" in str(refused.value)
    assert f"cel-python {installed} is installed" in str(refused.value)


def test_the_pinned_release_loads_and_is_the_one_installed() -> None:
    _pinned.check(_pinned.CEL_PYTHON)
    _pinned.check()  # this environment's


@pytest.mark.parametrize("lock", ["requirements.lock", "requirements-dev.lock"])
def test_the_lock_files_pin_the_release_the_engine_checks(lock: str) -> None:
    pins = re.findall(r"^cel-python==(\S+)", (ROOT / lock).read_text(), re.MULTILINE)
    assert pins == [_pinned.CEL_PYTHON]


def test_pyproject_asks_for_exactly_that_release() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (spec,) = [d for d in project["dependencies"] if d.startswith("cel-python")]
    assert spec == f"cel-python=={_pinned.CEL_PYTHON}"
