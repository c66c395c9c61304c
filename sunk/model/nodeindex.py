"""Slurm node name -> slurmd Pod -> Kubernetes Node, in one index (pure).

Every part of sunk asks this question (placement, binding, locks, drains, the dashboard):
it is answered here, from the slurmd Pods' ``spec.hostname`` and ``spec.nodeName``, in O(1),
and built again only when a slurmd Pod changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sunk import objects

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
        # Slurm node name -> the Node its slurmd Pod is bound to ("": not bound yet).
        bound_to: dict[str, str] = {}
        for pod in slurmd_pods:
            p = objects.pod(pod)
            hostname = p.spec.hostname
            if not hostname or p.metadata.terminating or p.status.phase in ENDED:
                continue
            slurmd[hostname] = pod
            bound_to[hostname] = p.spec.node_name
        to_k8s = {name: node for name, node in bound_to.items() if node}
        from_k8s: dict[str, list[str]] = {}
        for name, node in to_k8s.items():
            from_k8s.setdefault(node, []).append(name)
        return cls(slurmd, to_k8s, {k: tuple(sorted(v)) for k, v in from_k8s.items()})
