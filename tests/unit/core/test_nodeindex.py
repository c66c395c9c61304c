"""Slurm node -> slurmd Pod -> Kubernetes Node (sunk.model.nodeindex.NodeIndex), on plain data."""

from __future__ import annotations

from typing import Any

from sunk.model.nodeindex import NodeIndex


def slurmd(name: str, hostname: str | None, node: str | None = None, *,
           deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": "slurm", "name": name, "uid": f"uid-{name}"}
    if deleting:
        meta["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    spec: dict[str, Any] = {}
    if hostname is not None:
        spec["hostname"] = hostname
    if node is not None:
        spec["nodeName"] = node
    return {"metadata": meta, "spec": spec}


def test_an_empty_index() -> None:
    index = NodeIndex.build([])
    assert index == NodeIndex({}, {}, {})
    assert NodeIndex() == index


def test_a_slurm_node_leads_to_its_slurmd_pod_and_node() -> None:
    a, b = slurmd("slurmd-a", "h1", "n1"), slurmd("slurmd-b", "h2", "n2")
    index = NodeIndex.build([a, b])
    assert index.slurmd == {"h1": a, "h2": b}
    assert index.slurmd["h1"] is a
    assert index.to_k8s == {"h1": "n1", "h2": "n2"}
    assert index.from_k8s == {"n1": ("h1",), "n2": ("h2",)}


def test_a_deleting_slurmd_pod_or_one_without_hostname_is_left_out() -> None:
    live = slurmd("slurmd-a", "h1", "n1")
    index = NodeIndex.build([
        slurmd("slurmd-old", "h2", "n2", deleting=True),
        slurmd("slurmd-nohost", None, "n3"),
        slurmd("slurmd-empty", "", "n4"),
        {"metadata": {"name": "bare"}},
        live,
    ])
    assert index == NodeIndex({"h1": live}, {"h1": "n1"}, {"n1": ("h1",)})


def test_a_slurmd_pod_not_yet_on_a_node_has_no_node() -> None:
    pending = slurmd("slurmd-a", "h1")
    index = NodeIndex.build([pending])
    assert index.slurmd == {"h1": pending}
    assert index.to_k8s == {}
    assert index.from_k8s == {}
    assert index.to_k8s.get("h1") is None


def test_several_slurm_nodes_on_one_node_are_listed_sorted() -> None:
    pods = [slurmd("c", "h3", "n1"), slurmd("a", "h1", "n1"), slurmd("x", "x1", "n2"),
            slurmd("b", "h2", "n1")]
    index = NodeIndex.build(pods)
    assert index.from_k8s == {"n1": ("h1", "h2", "h3"), "n2": ("x1",)}
    assert index.to_k8s == {"h1": "n1", "h2": "n1", "h3": "n1", "x1": "n2"}
    assert list(index.slurmd) == ["h3", "h1", "x1", "h2"]


def test_the_index_takes_any_iterable_once() -> None:
    index = NodeIndex.build(iter([slurmd("a", "h1", "n1")]))
    assert index.to_k8s == {"h1": "n1"}


def test_an_ended_slurmd_pod_never_shadows_the_live_one_with_its_hostname() -> None:
    old = {"metadata": {"name": "old", "uid": "1"}, "spec": {"hostname": "h1", "nodeName": "n1"},
           "status": {"phase": "Failed"}}
    new = {"metadata": {"name": "new", "uid": "2"}, "spec": {"hostname": "h1", "nodeName": "n2"}}
    for order in ([old, new], [new, old]):
        index = NodeIndex.build(order)
        assert index.slurmd["h1"] is new
        assert index.to_k8s == {"h1": "n2"} and index.from_k8s == {"n2": ("h1",)}
