"""The soak's record for docs/benchmarks.md and its one-line summary: the work, the faults,
each invariant and what broke it."""

from __future__ import annotations

from typing import Any

from benchmarks import report as report_module
from benchmarks import results


def render(rec: results.Record) -> str:
    f = rec["figures"]
    by_kind = f.get("faults_by_kind", f.get("faults_by_part", {}))
    faults = ", ".join(f"{kind} {n}" for kind, n in sorted(by_kind.items()))
    restarts = f["scheduler_ready_after_restart_s"]
    lines = [
        f"- {f['minutes']:g} minutes, seed {f['seed']}: {f['pods_created']} Pods created"
        + (f" ({f['pods_seen']} seen, with those the soak's Jobs, JobSets and "
           "LeaderWorkerSets made)" if "pods_seen" in f else "")
        + f", {f['faults']} faults ({faults})",
    ]
    if work := f.get("work"):
        lines.append("- work done: " + ", ".join(f"{kind} {n}"
                                                  for kind, n in sorted(work.items())))
    looks = (f"- {f['looks']} looks at both sides ({f['unreadable_looks']} while a part was "
             "down and did not answer)")
    if (two := f.get("two_replicas_from_s")) is not None:
        looks += f"; two replicas with leader election from {two} s on"
    lines.append(looks)
    if restarts:
        lines.append(f"- scheduler ready after its restarts: {', '.join(map(str, restarts))} s")
    lines.append("- settled afterwards (no Pod, no job, no lock, taint or drain of sunk's "
                 f"left): {'yes' if f['settled'] else 'no'}")
    lines += ["", "| invariant | violations |", "|---|---|"]
    broken_all = f["violations"] + f["still_seen_at_end"]
    for name, words in f["invariants"].items():
        broken = [v for v in broken_all if v["invariant"] == name]
        lines.append(f"| {words} | {len(broken) or 'none'} |")
    for v in broken_all:
        lines.append(f"\n- at {v['since']} s, for {v['lasted']} s: {v['subject']}: {v['seen']}")
    return "\n".join(lines)


def summary(f: dict[str, Any]) -> str:
    return (f"[chaos] {f['pods_created']} Pods ({f.get('pods_seen', 0)} seen), work {f['work']}, "
            f"{f['faults']} faults "
            f"{f['faults_by_kind']}, {f['looks']} looks ({f['unreadable_looks']} while a part "
            f"was down); violations: {len(f['violations'])}, still seen at the end: "
            f"{len(f['still_seen_at_end'])}; settled: {f['settled']}")


report_module.register("chaos", render)
