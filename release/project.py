"""What every release artefact is stamped with: the version (one place, ``pyproject.toml``), the
commit, and the time reproducible builds use instead of now (``SOURCE_DATE_EPOCH``)."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DIST = REPO / "dist"


def version() -> str:
    """The project's version, which the image tag and the chart's version and appVersion use."""
    with (REPO / "pyproject.toml").open("rb") as f:
        return str(tomllib.load(f)["project"]["version"])


def revision() -> str:
    """The commit being built (``unknown`` outside a git checkout)."""
    done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                          text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else "unknown"


def source_date_epoch() -> int:
    """``$SOURCE_DATE_EPOCH``, else the time of the commit being built: every timestamp in an
    artefact is this or earlier, so building one commit twice gives the same bytes."""
    if env := os.environ.get("SOURCE_DATE_EPOCH"):
        return int(env)
    done = subprocess.run(["git", "log", "-1", "--format=%ct"], cwd=REPO, capture_output=True,
                          text=True, check=False)
    if done.returncode != 0 or not done.stdout.strip():
        raise SystemExit("release: not a git checkout; set SOURCE_DATE_EPOCH")
    return int(done.stdout.strip())


def say(message: str) -> None:
    print(f"[release] {message}", file=sys.stderr, flush=True)
