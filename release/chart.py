"""``make chart``: the Helm chart as ``dist/sunk-<version>.tgz``.

The chart's ``version`` and ``appVersion`` are the project's (``pyproject.toml``); helm stamps
them into the package, and a unit test keeps ``charts/sunk/Chart.yaml`` saying the same. The
package is linted (``helm lint --strict``) first; the helm is the test bed's, built from its Go
module and cached.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from release.project import DIST, REPO, say, version
from testbed.build import build_helm

CHART = REPO / "charts" / "sunk"


def helm_binary() -> Path:
    """The test bed's helm, built from its Go module (cached after the first build)."""
    return build_helm()


def package(out_dir: Path = DIST) -> Path:
    helm = str(helm_binary())
    v = version()
    lint = subprocess.run([helm, "lint", "--strict", str(CHART)], capture_output=True,
                          text=True, check=False)
    if lint.returncode != 0:
        raise SystemExit(f"release: helm lint failed:\n{lint.stdout}{lint.stderr}")
    out_dir.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([helm, "package", str(CHART), "--version", v, "--app-version", v,
                           "--destination", str(out_dir)], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise SystemExit(f"release: helm package failed:\n{done.stdout}{done.stderr}")
    path = out_dir / f"sunk-{v}.tgz"
    say(f"chart {path} (version and appVersion {v}); helm lint --strict: clean")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m release.chart", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output-dir", type=Path, default=DIST)
    args = parser.parse_args(argv)
    print(package(args.output_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
