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
        slurmd: dict[str, Obj] = {}
        to_k8s: dict[str, str] = {}
        from_k8s: dict[str, list[str]] = {}
        for pod in slurmd_pods:
            spec = pod.get("spec") or {}
            hostname, node = spec.get("hostname"), spec.get("nodeName")
            if not hostname or (pod.get("metadata") or {}).get("deletionTimestamp"):
                continue
            slurmd[hostname] = pod
            if node:
                to_k8s[hostname] = node
                from_k8s.setdefault(node, []).append(hostname)
        return cls(slurmd, to_k8s, {k: tuple(sorted(v)) for k, v in from_k8s.items()})
