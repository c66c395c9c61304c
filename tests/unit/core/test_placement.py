"""Which Slurm nodes a Pod must not get, on plain data."""

from __future__ import annotations

from typing import Any

from sunk.plans.placement import LOCK_TAINT, NodeInfo, Snapshot, excluded_slurm_nodes, tolerates

H100 = {"gpu.nvidia.com/model": "H100"}
A100 = {"gpu.nvidia.com/model": "A100"}


def snap(**nodes: NodeInfo) -> Snapshot:
    return Snapshot(slurm_to_k8s={f"s-{n}": n for n in nodes}, nodes=nodes)


def pod(**spec: Any) -> dict[str, Any]:
    return {"spec": spec}


def test_untolerated_noschedule_and_noexecute_taints_exclude_but_prefer_and_lock_do_not() -> None:
    s = snap(a=NodeInfo("a", taints=({"key": "x", "effect": "NoSchedule"},)),
             b=NodeInfo("b", taints=({"key": "y", "effect": "NoExecute"},)),
             c=NodeInfo("c", taints=({"key": "z", "effect": "PreferNoSchedule"},)),
             d=NodeInfo("d", taints=({"key": LOCK_TAINT, "effect": "NoSchedule"},)))
    assert excluded_slurm_nodes(pod(), s) == ["s-a", "s-b"]
    tolerant = pod(tolerations=[{"key": "x", "operator": "Exists"},
                                {"key": "y", "operator": "Equal", "value": "",
                                 "effect": "NoExecute"}])
    assert excluded_slurm_nodes(tolerant, s) == []


def test_required_node_affinity_and_node_selector() -> None:
    s = snap(h=NodeInfo("h", labels=H100), a=NodeInfo("a", labels=A100), n=NodeInfo("n"))
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "gpu.nvidia.com/model", "operator": "In", "values": ["A100"]}]}]}}}
    assert excluded_slurm_nodes(pod(affinity=affinity), s) == ["s-h", "s-n"]
    assert excluded_slurm_nodes(pod(nodeSelector=H100), s) == ["s-a", "s-n"]
    not_in = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "gpu.nvidia.com/model", "operator": "NotIn", "values": ["A100"]}]}]}}}
    assert excluded_slurm_nodes(pod(affinity=not_in), s) == ["s-a"]


def test_cordoned_and_unmapped_nodes_are_excluded() -> None:
    s = Snapshot(slurm_to_k8s={"s-a": "a"}, nodes={"a": NodeInfo("a", unschedulable=True)},
                 slurm_nodes=frozenset({"s-a", "s-orphan"}))
    assert excluded_slurm_nodes(pod(), s) == ["s-a", "s-orphan"]


def test_toleration_matching_follows_kubernetes() -> None:
    taint = {"key": "k", "value": "v", "effect": "NoSchedule"}
    assert tolerates([{"operator": "Exists"}], taint)
    assert tolerates([{"key": "k", "value": "v"}], taint)
    assert not tolerates([{"key": "k", "value": "w"}], taint)
    assert not tolerates([{"key": "k", "operator": "Exists", "effect": "NoExecute"}], taint)
