"""Facts with one writer: the job table (the Slurm poller, :mod:`sunk.model.jobtable`) and
what the executor remembers of Pods (:mod:`sunk.model.podmemory`).

Everyone else reads them through read-only views, ``Cluster.jobs``
(:class:`sunk.model.jobtable.JobsView`) and ``Executor.memory``
(:class:`sunk.model.podmemory.PodMemoryView`): mypy refuses a write through either (shown here
by running mypy on a small snippet). The writable table (``Cluster.job_table``, the poller's
``_jobs``) is named only by the cluster model and the poller (shown here by reading the
product's code)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

#: Each line of ``write`` is a write through ``Cluster.jobs``; ``read`` only reads (and writes
#: through the writable table, as the poller does): mypy must refuse every line of the one and
#: none of the other.
SNIPPET = '''\
from sunk.apply.executor import Executor
from sunk.model.cluster import Cluster
from sunk.slurm.job import Job


def read_memory(executor: Executor) -> None:
    executor.memory.replaced.get("uid")
    executor.memory.refitted.get("uid", set())
    executor.forget_pod("uid")
    executor.forget_gang("gang")


def write_memory(executor: Executor) -> None:
    executor.memory.replaced["uid"] = {1}
    executor.memory.told_ignored.add("uid")
    executor.memory.forget("uid")
    executor.memory.refitted.setdefault("uid", set())
    executor.memory.uncertain_submits.pop("uid")
    executor.memory.told_not_counted.clear()
    executor.memory.withdrawn["gang"].add(1)
    executor.memory = executor.memory


def read(cluster: Cluster, job: Job) -> None:
    cluster.jobs.by_uid.get("uid")
    cluster.jobs.member_of.get("member")
    cluster.jobs.get(41)
    cluster.jobs.owner(41)
    cluster.jobs.placed("uid", "member")
    cluster.jobs.newest_id()
    cluster.jobs.allocated.get(41, "")
    cluster.jobs.unanswered.get("uid")
    cluster.job_table.learn(job)


def write(cluster: Cluster, job: Job) -> None:
    cluster.jobs.learn(job)
    cluster.jobs.by_uid["uid"] = 41
    cluster.jobs.submitted_at[41] = 0.0
    cluster.jobs.allocated[41] = "slurm-1"
    cluster.jobs.in_prolog.add(41)
    del cluster.jobs.jobs[41]
    cluster.jobs.forget(41)
    cluster.jobs.heard_started(41)
    cluster.jobs.learn_started(41)
    cluster.jobs.submitted("uid", 41, 0.0)
    cluster.jobs.lock_checked(41, job)
    cluster.jobs.note_placeholder(job)
    cluster.jobs.ours(job)
    cluster.jobs.unanswered["uid"] = 1
    cluster.jobs.submit_unanswered("uid", 1)
    cluster.jobs = cluster.job_table
'''

CONFIG = """\
[mypy]
strict = True
follow_imports = silent

[mypy-kr8s.*,celpy.*]
ignore_missing_imports = True
"""

#: The modules that may name the writable table: the table, the cluster model that holds it,
#: and its one writer.
WRITERS = {"sunk/model/jobtable.py", "sunk/model/cluster.py", "sunk/model/slurmwatch.py"}


def test_mypy_refuses_every_write_through_a_read_only_view(tmp_path: Path) -> None:
    (tmp_path / "snippet.py").write_text(SNIPPET)
    (tmp_path / "mypy.ini").write_text(CONFIG)
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "mypy.ini", "--cache-dir",
         str(tmp_path / "cache"), "--no-error-summary", "snippet.py"],
        cwd=tmp_path, env={**os.environ, "MYPYPATH": str(ROOT)}, text=True,
        capture_output=True, timeout=300, check=False)
    refused = {int(m[1]) for m in re.finditer(r"^snippet\.py:(\d+): error", result.stdout,
                                              re.MULTILINE)}
    lines = SNIPPET.splitlines()
    start = lines.index("def write(cluster: Cluster, job: Job) -> None:") + 2
    writes = set(range(start, len(lines) + 1))
    start = lines.index("def write_memory(executor: Executor) -> None:") + 2
    end = lines.index("def read(cluster: Cluster, job: Job) -> None:") - 1  # 2 blank lines
    writes |= set(range(start, end))
    assert result.returncode == 1, result.stdout + result.stderr
    assert refused == writes, result.stdout


def names_the_writable_table(tree: ast.AST) -> list[int]:
    """Lines that reach the writable table: ``.job_table``, ``._jobs`` or ``JobTable``."""
    return sorted(node.lineno for node in ast.walk(tree)
                  if (isinstance(node, ast.Attribute) and node.attr in ("job_table", "_jobs"))
                  or (isinstance(node, ast.Name) and node.id == "JobTable")
                  or (isinstance(node, ast.alias) and node.name == "JobTable"))


def test_only_the_slurm_poller_reaches_the_writable_job_table() -> None:
    found = []
    for package in ("sunk", "web"):
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative in WRITERS:
                continue
            found += [f"{relative}:{line}"
                      for line in names_the_writable_table(ast.parse(path.read_text()))]
    assert found == [], "only the Slurm poller writes the job table: " + ", ".join(found)


def test_the_check_finds_a_part_that_reaches_the_writable_table() -> None:
    tree = ast.parse("def f(cluster):\n    cluster.job_table.learn(None)\n"
                     "    watch._jobs.forget(1)\n"
                     "from sunk.model.jobtable import JobTable\n")
    assert names_the_writable_table(tree) == [2, 3, 4]
