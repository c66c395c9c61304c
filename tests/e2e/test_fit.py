"""Never bind a Pod the kubelet would refuse: Kubernetes' room is checked beside Slurm's choice.

The test bed's Nodes are sized as an operator should size them: allocatable is the Slurm node's
CPUs, memory and GPUs plus the slurmd Pod's requests. Pods that Slurm does not know of (a
DaemonSet's, one tolerating the lock taint) take room that Slurm would still hand out.
"""

from __future__ import annotations

from typing import Any

import httpx

from sunk.kube import Client
from sunk.plans import fit
from testbed import cluster
from testbed.topology import NODE_CPUS, SLURMD_CPUS
from tests.e2e.conftest import RunningScheduler
from tests.e2e.helpers import (
    create,
    events_for,
    eventually,
    get_pod,
    kube_list,
    pod_manifest,
    quiet,
    wait_bound,
)

LOCK_TOLERATION = {"key": "sunk.coreweave.com/lock", "operator": "Exists"}


def hostname(node: str) -> dict[str, Any]:
    return {"nodeSelector": {"kubernetes.io/hostname": node}}


def bound_pod(name: str, namespace: str, node: str, *, cpu: str = "0", gpus: int = 0,
              daemonset_uid: str | None = None,
              tolerate_lock: bool = False) -> dict[str, Any]:
    """A Pod placed without sunk (bound at creation, as a DaemonSet's Pods are)."""
    requests = {"cpu": cpu, "memory": "100Mi"}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
    manifest: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "main", "image": "busybox",
                                 "resources": {"requests": requests, "limits": {
                                     k: v for k, v in requests.items() if k != "cpu"
                                     and k != "memory"}}}]}}
    if daemonset_uid:
        manifest["metadata"]["ownerReferences"] = [{
            "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "node-agent",
            "uid": daemonset_uid, "controller": True}]
    if tolerate_lock:
        manifest["spec"]["tolerations"] = [LOCK_TOLERATION]
    return manifest


async def daemonset(kube: Client, namespace: str) -> str:
    """A DaemonSet to own a Pod (no controller runs it); its uid. An owner that does not exist
    would have the garbage collector delete the Pod."""
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet",
          "metadata": {"name": "node-agent", "namespace": namespace},
          "spec": {"selector": {"matchLabels": {"app": "node-agent"}}, "template": {
              "metadata": {"labels": {"app": "node-agent"}},
              "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}
    created = await kube.request("POST", "daemonsets", namespace=namespace, version="apps/v1",
                                 json=ds)
    uid: str = created["metadata"]["uid"]
    return uid


async def requested_on(kube: Client) -> dict[str, dict[str, int]]:
    """Node -> what every Pod bound there requests (as the kubelet counts it)."""
    by_node: dict[str, list[dict[str, Any]]] = {}
    for pod in await kube_list(kube, "pods"):
        if fit.holds_node(pod):
            by_node.setdefault(pod["spec"]["nodeName"], []).append(pod)
    return {node: fit.sum_requests(pods) for node, pods in by_node.items()}


async def assert_no_node_over_allocatable(kube: Client) -> None:
    nodes = {n["metadata"]["name"]: fit.allocatable(n) for n in await kube_list(kube, "nodes")}
    for node, used in (await requested_on(kube)).items():
        over = {r: (amount, nodes[node].get(r, 0)) for r, amount in used.items()
                if amount > nodes[node].get(r, 0)}
        assert not over, f"Node {node} is bound over its allocatable: {over}"


async def test_many_small_pods_all_bind_and_no_node_goes_over_allocatable(
        kube: Client, slurm: httpx.AsyncClient, namespace: str, scheduler: RunningScheduler,
        testbed: cluster.Testbed) -> None:
    """Slurm packs 1-CPU jobs 32 to a node; each Node holds exactly those and its slurmd Pod."""
    await quiet(slurm, testbed)
    count = min(100, NODE_CPUS * len(testbed.nodes))
    for i in range(count):
        await create(kube, pod_manifest(f"small-{i:03d}", namespace, scheduler.name, cpu="1",
                                        memory="100Mi"))
    for i in range(count):
        await wait_bound(kube, namespace, f"small-{i:03d}", within=120)
    await assert_no_node_over_allocatable(kube)


async def test_a_node_with_a_daemonset_pod_gets_only_what_it_has_room_for(
        kube: Client, slurm: httpx.AsyncClient, namespace: str, scheduler: RunningScheduler,
        testbed: cluster.Testbed) -> None:
    """A DaemonSet-like Pod of 4 CPUs on a Node Slurm still offers 32 CPUs of: 28 Pods of 1 CPU
    are bound there, the others wait without a job (none pending behind a running job), and
    the disagreement between Slurm's node and the Node is told on the Node."""
    await quiet(slurm, testbed)
    node = testbed.nodes[1]
    await create(kube, bound_pod("node-agent", namespace, node.k8s_name, cpu="4",
                                 daemonset_uid=await daemonset(kube, namespace)))
    room = NODE_CPUS - 4
    for i in range(NODE_CPUS):
        await create(kube, pod_manifest(f"pinned-{i:02d}", namespace, scheduler.name, cpu="1",
                                        memory="100Mi", **hostname(node.k8s_name)))

    async def settled() -> list[str] | None:
        pods = [await get_pod(kube, namespace, f"pinned-{i:02d}") for i in range(NODE_CPUS)]
        bound = [p["metadata"]["name"] for p in pods if p and p["spec"].get("nodeName")]
        assert len(bound) <= room, f"{len(bound)} Pods bound where {room} fit"
        return bound if len(bound) == room else None

    await eventually(settled, within=120)
    await assert_no_node_over_allocatable(kube)

    async def no_job_runs_for_a_waiting_pod() -> bool:
        waiting = {f"pod:{namespace}/pinned-{i:02d}" for i in range(NODE_CPUS)
                   if not ((await get_pod(kube, namespace, f"pinned-{i:02d}")) or {})
                   .get("spec", {}).get("nodeName")}
        jobs = (await slurm.get("/slurm/v0.0.42/jobs/")).json()["jobs"]
        running = {j["name"] for j in jobs if j["job_state"][0] in ("RUNNING", "PENDING")}
        return len(waiting) == NODE_CPUS - room and not waiting & running

    await eventually(no_job_runs_for_a_waiting_pod, within=60)

    async def mismatch_told() -> bool:
        reasons = {e["reason"] for e in await events_for(kube, "default", node.k8s_name)}
        return "SlurmNodeSizeMismatch" in reasons

    await eventually(mismatch_told, within=30)
    assert (await requested_on(kube))[node.k8s_name]["cpu"] == 1000 * (room + 4 + SLURMD_CPUS)


async def test_gpus_held_by_a_pod_the_lock_keeps_count_those_of_an_evictable_pod_do_not(
        kube: Client, slurm: httpx.AsyncClient, namespace: str, scheduler: RunningScheduler,
        testbed: cluster.Testbed) -> None:
    await quiet(slurm, testbed)
    h100 = [n for n in testbed.nodes if n.gres_type == "h100"][:2]
    kept, evictable = h100[0].k8s_name, h100[1].k8s_name
    await create(kube, bound_pod("tolerates-lock", namespace, kept, gpus=2, tolerate_lock=True))
    await create(kube, bound_pod("ordinary", namespace, evictable, gpus=8))
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{
            "key": "kubernetes.io/hostname", "operator": "In", "values": [kept, evictable]}]}]}}}
    await create(kube, pod_manifest("all-gpus", namespace, scheduler.name, cpu="4",
                                    memory="8Gi", gpus=8, affinity=affinity))
    pod = await wait_bound(kube, namespace, "all-gpus", within=90)
    assert pod["spec"]["nodeName"] == evictable

    async def evicted() -> bool:
        return await get_pod(kube, namespace, "ordinary") is None

    await eventually(evicted, within=30)
    assert await get_pod(kube, namespace, "tolerates-lock") is not None
