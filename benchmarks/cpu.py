"""CPU seconds per part of the test bed during a benchmark phase, from /proc.

On the test bed every part (API server, etcd, kwok, slurmctld, the slurmd, slurmrestd, the
scheduler, the job scripts) shares the machine's cores, so a phase's speed is mostly a matter
of how much CPU each item costs, and where. Long-lived processes are counted from their own
``/proc/PID/stat``; what short-lived processes (slurmstepd, prologs, job scripts, curl,
scontrol) used is the machine's busy time minus the rest ("job processes and other").
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")

#: Group of a process, by its command name (``comm``) or, for Python, its command line.
GROUPS = {
    "etcd": "etcd",
    "kube-apiserver": "kube-apiserver",
    "kwok": "kwok",
    "slurmctld": "slurmctld",
    "slurmrestd": "slurmrestd",
    "slurmd": "slurmd",
    "munged": "munged",
}


def _group(pid: str, comm: str) -> str | None:
    # The test bed's Go binaries carry their version: etcd-v3.6.16, kube-apiserver-v1.35.4
    # (``comm`` keeps 15 characters of it).
    name = comm.split("-v")[0].rstrip("-")
    if name in GROUPS:
        return GROUPS[name]
    if comm.startswith("python"):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return None
        if b"sunk" in cmdline and b"-m" in cmdline:
            return "sunk-scheduler"
        if pid == str(os.getpid()):
            return "benchmark"
    return None


@dataclass
class Sample:
    busy: float  #: machine-wide busy CPU seconds
    by_group: dict[str, float]
    by_pid: dict[str, tuple[str, float]]


def sample() -> Sample:
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(x) for x in fields]
    idle = ticks[3] + ticks[4]  # idle + iowait
    busy = (sum(ticks[:8]) - idle) / TICK
    by_pid: dict[str, tuple[str, float]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        rest = stat[stat.rindex(")") + 2:].split()
        group = _group(entry.name, comm)
        if group is not None:
            # utime and stime are fields 14 and 15 (rest starts at field 3)
            by_pid[entry.name] = (group, (int(rest[11]) + int(rest[12])) / TICK)
    by_group: dict[str, float] = {}
    for group, seconds in by_pid.values():
        by_group[group] = by_group.get(group, 0.0) + seconds
    return Sample(busy=busy, by_group=by_group, by_pid=by_pid)


def used(before: Sample, after: Sample) -> dict[str, float]:
    """CPU seconds per group between two samples (only processes alive at both count)."""
    out: dict[str, float] = {}
    for pid, (group, seconds) in after.by_pid.items():
        start = before.by_pid.get(pid, (group, 0.0))[1] if pid in before.by_pid else None
        if start is None:
            continue
        out[group] = out.get(group, 0.0) + seconds - start
    busy = after.busy - before.busy
    out["job processes and other"] = max(0.0, busy - sum(out.values()))
    out["machine total"] = busy
    return out
