"""What the dashboard reads of a running scheduler (``sunk.wiring.DashboardSource``): the
cluster model's own Pods, Nodes and node index, and the watches' health, never a raw cache."""

from __future__ import annotations

from sunk.apply.ports import KubeAPI
from sunk.policy import PolicyStore
from sunk.wiring import DashboardSource
from tests.unit.core import stand_ins
from tests.unit.core.stand_ins import NAME, POLICIES, node, pod, put, slurmd


async def test_the_dashboard_reads_the_models_pods_nodes_and_index() -> None:
    async with stand_ins.bed() as bed:
        source = DashboardSource(bed.cluster, PolicyStore.from_directory(POLICIES),
                                 KubeAPI(bed.cluster.api, NAME))
        put(bed.cluster.node_informer, node("node-a"))
        put(bed.cluster.slurmd_informer, slurmd("slurm-1", "node-a",
                                                annotations={"sunk.coreweave.com/lock": "locked"}))
        bed.add_pod(pod(name="p", namespace="ns"))

        assert (source.pod("ns", "p") or {})["metadata"]["uid"] == "aaaa-0001"
        assert source.pod("ns", "other") is None and source.pod("elsewhere", "p") is None
        assert (source.node("node-a") or {})["metadata"]["name"] == "node-a"
        assert source.node("node-b") is None
        index = source.node_index
        assert index.to_k8s == {"slurm-1": "node-a"}
        assert index.slurmd["slurm-1"]["metadata"]["annotations"] == {
            "sunk.coreweave.com/lock": "locked"}
        assert index is bed.cluster.index(), "the scheduler's own index, not one of its own"


async def test_the_watches_are_a_problem_until_they_listed_and_while_one_fails() -> None:
    async with stand_ins.bed() as bed:
        source = DashboardSource(bed.cluster, PolicyStore.from_directory(POLICIES),
                                 KubeAPI(bed.cluster.api, NAME))
        bed.cluster.ready.clear()
        assert source.kube_problem() == "caches not synced yet"
        bed.cluster.ready.set()
        for informer in bed.cluster.informers():
            informer.healthy = True  # listed, watching
        assert source.kube_problem() == ""
        bed.cluster.node_informer.healthy = False
        bed.cluster.node_informer.last_error = "ServerError: 503"
        assert source.kube_problem() == "nodes: ServerError: 503"
