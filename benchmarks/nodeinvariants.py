"""The invariants of Nodes and GPUs, on one look (pure; :mod:`benchmarks.invariants` holds the
look and the others): no Node over its allocatable, no GPU given twice, no lock or drain of
sunk's left once nothing needs it."""

from __future__ import annotations

import re

from benchmarks.invariants import ACTIVE, Look, Violation, member_id

#: How sunk names its drains in Slurm: a cordon's (``k8s: ...``) and the placeholder's when a
#: Pod outlived KillWait (``sunk: Pod <namespace>/<name> still terminating ...``).
K8S_DRAIN, SUNK_DRAIN = "k8s:", re.compile(r"^sunk: Pod (?P<ns>[^/\s]+)/(?P<name>\S+)")
#: Slurm node states in which it runs (or ends) a job.
BUSY = frozenset({"ALLOCATED", "MIXED", "COMPLETING"})


def over_allocatable(look: Look) -> list[Violation]:
    """The requests of the Pods bound to each Node (the soak's and every other) against its
    allocatable."""
    held: dict[str, list[int]] = {}
    for pod in (*look.pods, *look.others):
        if pod.node:
            room = held.setdefault(pod.node, [0, 0])
            room[0] += pod.cpu_m
            room[1] += pod.memory
    found = []
    for node in look.nodes:
        cpu_m, memory = held.get(node.name, (0, 0))
        over = []
        if cpu_m > node.cpu_m:
            over.append(f"CPU {cpu_m}m of {node.cpu_m}m")
        if memory > node.memory:
            over.append(f"memory {memory} of {node.memory} bytes")
        if over:
            found.append(Violation("no-node-over-allocatable", f"node {node.name}",
                                   "bound Pods request " + ", ".join(over)))
    return found


def gpus_given_twice(look: Look) -> list[Violation]:
    """A GPU a claim holds that an active job not of the claim's Pod holds too."""
    slurm_of = {k8s: slurm for slurm, k8s in look.host_of.items()}
    holders: dict[tuple[str, int], list[int]] = {}
    by_id = {j.job_id: j for j in look.jobs}
    for job in look.jobs:
        if job.state in ACTIVE or job.completing:
            for gpu in job.gpus:
                holders.setdefault(gpu, []).append(job.job_id)
    found = []
    for claim in look.claims:
        slurm_node = slurm_of.get(claim.node, "")
        for index in sorted(claim.gpus):
            others = [i for i in holders.get((slurm_node, index), [])
                      if claim.pod_uid != by_id[i].uid
                      and member_id(claim.pod_uid) not in by_id[i].members]
            if others:
                found.append(Violation("no-gpu-given-twice", f"claim {claim.name}",
                                       f"GPU {index} of {claim.node} is also job "
                                       f"{', '.join(map(str, others))}'s"))
    return found


def needless_locks(look: Look) -> list[Violation]:
    """A lock or lock taint on a Node whose Slurm node runs nothing; a cordon's drain on a Node
    no longer cordoned; a drain for a Pod outliving KillWait once that Pod is gone."""
    pods = {p.name for p in look.pods}
    found = []
    for node in look.nodes:
        busy = bool(node.slurm_states & BUSY)
        if (node.tainted or node.lock != "false") and not busy:
            found.append(Violation("no-lock-nothing-needs", f"node {node.name}",
                                   f"lock {node.lock}, taint {'yes' if node.tainted else 'no'}; "
                                   f"Slurm node {node.slurm_name} runs nothing"))
        if "DRAIN" not in node.slurm_states:
            continue
        if node.slurm_reason.startswith(K8S_DRAIN) and not node.cordoned:
            found.append(Violation("no-lock-nothing-needs", f"drain of {node.name}",
                                   f"drained ({node.slurm_reason}) but not cordoned"))
        elif (m := SUNK_DRAIN.match(node.slurm_reason)) and m["name"] not in pods:
            found.append(Violation("no-lock-nothing-needs", f"drain of {node.name}",
                                   f"drained ({node.slurm_reason}); that Pod is gone"))
    return found
