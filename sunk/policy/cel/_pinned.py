"""The cel-python release this engine was written against, checked when it is imported.

The engine replaces private methods of cel-python's ``Evaluator`` and calls its internals
(:mod:`sunk.policy.cel.evaluator`): another release may change them without a word, and
policies would then decide otherwise, or fail, only at run time. So a different release
refuses to load, saying which one is needed. ``requirements.lock`` and ``pyproject.toml`` pin
the same one (``tests/unit/policy/test_cel_pin.py``).
"""

from __future__ import annotations

import importlib.metadata

#: The cel-python release the overrides were written against (and tested with).
CEL_PYTHON = "0.5.0"


class WrongCelPython(ImportError):
    """cel-python is not the release the engine was written against."""


def check(installed: str | None = None) -> None:
    """Raise WrongCelPython unless ``installed`` (default: the installed cel-python) is
    :data:`CEL_PYTHON`."""
    if installed is None:
        try:
            installed = importlib.metadata.version("cel-python")
        except importlib.metadata.PackageNotFoundError:
            installed = "none"
    if installed != CEL_PYTHON:
        raise WrongCelPython(
            f"sunk's CEL engine overrides private parts of cel-python {CEL_PYTHON}, and "
            f"cel-python {installed} is installed: install cel-python=={CEL_PYTHON} "
            "(requirements.lock pins it)")


check()
