"""Slurm node name -> slurmd Pod -> Kubernetes Node, in one index (pure).

Every part of sunk asks this question (placement, binding, locks, drains, the dashboard):
it is answered here, from the slurmd Pods' ``spec.hostname`` and ``spec.nodeName``, in O(1),
and built again only when a slurmd Pod changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]
#: Pod phases after which a slurmd Pod runs nothing.
ENDED = frozenset({"Failed", "Succeeded"})


@dataclass(frozen=True)
class NodeIndex:
    #: Slurm node name -> its live slurmd Pod.
    slurmd: Mapping[str, Obj] = field(default_factory=dict)
    #: Slurm node name -> the Kubernetes Node its slurmd Pod runs on.
    to_k8s: Mapping[str, str] = field(default_factory=dict)
    #: Kubernetes Node -> the Slurm nodes on it.
    from_k8s: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def build(cls, slurmd_pods: Iterable[Obj]) -> NodeIndex:
        """A slurmd Pod being deleted, or ended (Failed, Succeeded), holds no Slurm node: a
        new one with the same hostname may already run elsewhere."""
        slurmd: dict[str, Obj] = {}
        for pod in slurmd_pods:
            hostname = (pod.get("spec") or {}).get("hostname")
            if not hostname or (pod.get("metadata") or {}).get("deletionTimestamp") or (
                    (pod.get("status") or {}).get("phase") in ENDED):
                continue
            slurmd[hostname] = pod
        to_k8s = {name: node for name, pod in slurmd.items()
                  if (node := (pod.get("spec") or {}).get("nodeName"))}
        from_k8s: dict[str, list[str]] = {}
        for name, node in to_k8s.items():
            from_k8s.setdefault(node, []).append(name)
        return cls(slurmd, to_k8s, {k: tuple(sorted(v)) for k, v in from_k8s.items()})
