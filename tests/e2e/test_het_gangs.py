"""Gangs whose members differ, on the real bed: one heterogeneous Slurm job, a component per
shape, each sized exactly (no GPU on a CPU member's node), all or nothing.

Each kind (sunk's label, a LeaderWorkerSet whose leader differs from its workers, a JobSet
with a CPU driver and GPU workers) waits while one node is short, then binds every member at
once, each on a node of its own component. A member lost before or after the start, a
``scancel``, a preemption and a scheduler killed half way end with no orphan job, no
half-bound gang and no lock left behind.
"""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from sunk.kube import Client
from sunk.slurm.text import expand_hostlist
from testbed import cluster
from testbed.scheduler import start_scheduler
from tests.e2e.conftest import RunningScheduler
from tests.e2e.helpers import (
    call_api,
    create,
    events_for,
    eventually,
    get_pod,
    pod_manifest,
    quiet,
)
from tests.e2e.test_gangs import (
    PREFIX,
    assert_clean,
    assert_none_bound_for,
    block,
    end_gang,
    jobs_named,
    live_jobs,
    preempted_on,
    wait_all_bound,
)
from tests.e2e.test_jobset_gangs import VERSION as JOBSET_VERSION
from tests.e2e.test_jobset_gangs import in_jobset_order, replicated

GPUS = 2


def cpu_spec(namespace: str, scheduler: str) -> dict[str, Any]:
    spec: dict[str, Any] = pod_manifest("x", namespace, scheduler, cpu="1", memory="1Gi")["spec"]
    return spec


def gpu_spec(namespace: str, scheduler: str) -> dict[str, Any]:
    spec: dict[str, Any] = pod_manifest("x", namespace, scheduler, cpu="3", memory="2Gi",
                                        gpus=GPUS)["spec"]
    return spec


def labelled(name: str, namespace: str, scheduler: str, gang: str, rank: int, *,
             gpus: bool, **annotations: str) -> dict[str, Any]:
    manifest = pod_manifest(name, namespace, scheduler, cpu="3" if gpus else "1",
                            memory="2Gi" if gpus else "1Gi", gpus=GPUS if gpus else 0,
                            annotations={f"{PREFIX}gang-size": "4",
                                         f"{PREFIX}gang-index": str(rank), **annotations})
    manifest["metadata"]["labels"] = {f"{PREFIX}gang": gang}
    return manifest


async def components(slurm: httpx.AsyncClient, job_name: str) -> list[dict[str, Any]]:
    """The newest heterogeneous job of that name, its components in order."""
    listed = await jobs_named(slurm, job_name)
    leader = max(j["het_job_id"]["number"] for j in listed)
    return sorted((j for j in listed if j["het_job_id"]["number"] == leader),
                  key=lambda j: j["het_job_offset"]["number"])


def gpus_per_node(component: dict[str, Any]) -> int:
    tres = component.get("tres_per_node") or ""
    return int(tres.rsplit(":", 1)[1]) if "gpu" in tres else 0


async def assert_in_components(testbed: cluster.Testbed, slurm: httpx.AsyncClient,
                               pods: list[dict[str, Any]], job_name: str,
                               shapes: list[tuple[int, int, int]]) -> list[dict[str, Any]]:
    """Slurm's record has a component per shape, sized exactly (``(nodes, CPUs per task,
    GPUs per node)``), and each member (rank order) is bound to the next node of its
    component, which the member's own requests say."""
    parts = await components(slurm, job_name)
    assert [(p["node_count"]["number"], p["cpus_per_task"]["number"], gpus_per_node(p))
            for p in parts] == shapes
    leader = parts[0]["job_id"]
    k8s = {n.slurm_name: n.k8s_name for n in testbed.nodes}
    # Slurm numbers a component's tasks in its node-table order (the bed's), and prints an
    # ended job's nodes sorted by name: the order is the bed's, not the printed one.
    order = [n.slurm_name for n in testbed.nodes]
    left = [sorted(expand_hostlist(p["nodes"]), key=order.index) for p in parts]
    for rank, pod in enumerate(pods):
        annotations = pod["metadata"]["annotations"]
        asks_gpu = "nvidia.com/gpu" in pod["spec"]["containers"][0]["resources"]["requests"]
        part = next(i for i, (_, _, g) in enumerate(shapes) if bool(g) == asks_gpu)
        node = left[part].pop(0)
        assert annotations[f"{PREFIX}gang-rank"] == str(rank)
        assert annotations[f"{PREFIX}gang-node"] == node, (pod["metadata"]["name"], rank)
        assert annotations[f"{PREFIX}job-id"] == str(leader)
        assert pod["spec"]["nodeName"] == k8s[node]
    return parts


async def one_node_short_then_bound(kube: Client, slurm: httpx.AsyncClient,
                                    testbed: cluster.Testbed, namespace: str,
                                    make: Callable[[], Awaitable[list[str]]], job_name: str,
                                    shapes: list[tuple[int, int, int]]
                                    ) -> tuple[list[str], list[dict[str, Any]]]:
    """With all but 3 nodes busy the gang of 4 waits and nothing binds; freed, every member
    binds at once in its own component. ``make`` creates the gang; its members' names in
    rank order."""
    await quiet(slurm, testbed)
    blocker = block(testbed, testbed.nodes[3:])
    try:
        names = await make()
        pending = await eventually(lambda: live_jobs(slurm, job_name), within=30)
        assert len(pending) == len(shapes), "a component per shape"
        await assert_none_bound_for(kube, namespace, names, 8)
        assert {j["job_state"][0] for j in await live_jobs(slurm, job_name)} == {"PENDING"}
        testbed.slurm("scancel", blocker)
        pods = await wait_all_bound(kube, namespace, names)
        return names, await assert_in_components(testbed, slurm, pods, job_name, shapes)
    finally:
        testbed.slurm("scancel", blocker)


CPU_AND_GPUS = [(1, 1, 0), (3, 3, GPUS)]


def labelled_gang(kube: Client, namespace: str, scheduler: str, gang: str,
                  **annotations: str) -> Callable[[], Awaitable[list[str]]]:
    async def make() -> list[str]:
        names = [f"{gang}-{i}" for i in range(4)]
        for rank, name in enumerate(names):
            await create(kube, labelled(name, namespace, scheduler, gang, rank, gpus=rank > 0,
                                        **annotations))
        return names
    return make


async def test_a_labelled_gang_of_a_cpu_member_and_gpu_members_is_one_heterogeneous_job(
        kube: Client, slurm: httpx.AsyncClient, namespace: str, scheduler: RunningScheduler,
        testbed: cluster.Testbed) -> None:
    job_name = f"gang:{namespace}/label:mixed"
    names, parts = await one_node_short_then_bound(
        kube, slurm, testbed, namespace, labelled_gang(kube, namespace, scheduler.name,
                                                       "mixed"), job_name, CPU_AND_GPUS)
    assert "gpu" not in (parts[0].get("tres_alloc_str") or ""), "no GPU on the CPU member's node"
    testbed.slurm("scancel", str(parts[0]["job_id"]))
    await assert_clean(kube, slurm, testbed, namespace, names, job_name)


async def test_a_leaderworkerset_whose_leader_differs_from_its_workers(
        kube: Client, slurm: httpx.AsyncClient, namespace: str, scheduler: RunningScheduler,
        testbed: cluster.Testbed) -> None:
    version = "leaderworkerset.x-k8s.io/v1"

    async def make() -> list[str]:
        await kube.request("POST", "leaderworkersets", namespace=namespace, version=version,
                           json={"apiVersion": version, "kind": "LeaderWorkerSet",
                                 "metadata": {"name": "infer", "namespace": namespace},
                                 "spec": {"replicas": 1, "leaderWorkerTemplate": {
                                     "size": 4,
                                     "leaderTemplate": {"spec": cpu_spec(namespace,
                                                                         scheduler.name)},
                                     "workerTemplate": {"spec": gpu_spec(namespace,
                                                                         scheduler.name)}}}})
        return ["infer-0", "infer-0-1", "infer-0-2", "infer-0-3"]

    job_name = f"gang:{namespace}/lws:infer-0"
    await one_node_short_then_bound(kube, slurm, testbed, namespace, make, job_name,
                                    CPU_AND_GPUS)
    async with call_api(kube, "DELETE", namespace=namespace, url="leaderworkersets/infer",
                        version=version, raise_for_status=False):
        pass
    async with call_api(kube, "DELETE", namespace=namespace, url="pods",
                        raise_for_status=False):
        pass

    async def ended() -> bool:
        return not await live_jobs(slurm, job_name)

    await eventually(ended, within=60)


async def test_a_jobset_with_a_cpu_driver_and_gpu_workers(
        kube: Client, slurm: httpx.AsyncClient, namespace: str, scheduler: RunningScheduler,
        testbed: cluster.Testbed) -> None:
    driver, workers = cpu_spec(namespace, scheduler.name), gpu_spec(namespace, scheduler.name)
    for spec in (driver, workers):
        spec["restartPolicy"] = "Never"
        spec["activeDeadlineSeconds"] = 600

    async def make() -> list[str]:
        await kube.request("POST", "jobsets", namespace=namespace, version=JOBSET_VERSION, json={
            "apiVersion": JOBSET_VERSION, "kind": "JobSet",
            "metadata": {"name": "train", "namespace": namespace},
            "spec": {"replicatedJobs": [replicated("driver", driver, parallelism=1),
                                        replicated("workers", workers, parallelism=3)]}})
        return await eventually(lambda: in_jobset_order(kube, namespace, 4), within=60)

    await one_node_short_then_bound(kube, slurm, testbed, namespace, make,
                                    f"gang:{namespace}/jobset:train", CPU_AND_GPUS)


async def test_a_member_deleted_before_the_start_withdraws_every_component(
        kube: Client, slurm: httpx.AsyncClient, namespace: str, scheduler: RunningScheduler,
        testbed: cluster.Testbed) -> None:
    await quiet(slurm, testbed)
    job_name = f"gang:{namespace}/label:pre"
    blocker = block(testbed, testbed.nodes[3:])
    try:
        names = await labelled_gang(kube, namespace, scheduler.name, "pre")()
        first = await eventually(lambda: live_jobs(slurm, job_name), within=30)
        assert len(first) == 2
        async with call_api(kube, "DELETE", namespace=namespace, url=f"pods/{names[2]}",
                            params={"gracePeriodSeconds": "0"}):
            pass

        async def none_live() -> bool:
            return not await live_jobs(slurm, job_name)

        await eventually(none_live, within=30)
        await create(kube, labelled(names[2], namespace, scheduler.name, "pre", 2, gpus=True))
        second = await eventually(lambda: live_jobs(slurm, job_name), within=30)
        assert {j["job_id"] for j in second}.isdisjoint(j["job_id"] for j in first)
        testbed.slurm("scancel", blocker)
        pods = await wait_all_bound(kube, namespace, names)
        await assert_in_components(testbed, slurm, pods, job_name, CPU_AND_GPUS)
    finally:
        testbed.slurm("scancel", blocker)
    await end_gang(kube, slurm, namespace, names, job_name)


async def started(kube: Client, slurm: httpx.AsyncClient, testbed: cluster.Testbed,
                  namespace: str, scheduler: str, gang: str) -> tuple[list[str], str, int]:
    await quiet(slurm, testbed)
    names = await labelled_gang(kube, namespace, scheduler, gang)()
    job_name = f"gang:{namespace}/label:{gang}"
    pods = await wait_all_bound(kube, namespace, names)
    parts = await assert_in_components(testbed, slurm, pods, job_name, CPU_AND_GPUS)
    return names, job_name, parts[0]["job_id"]


async def test_a_gpu_member_deleted_after_the_start_ends_every_component(
        kube: Client, slurm: httpx.AsyncClient, namespace: str, scheduler: RunningScheduler,
        testbed: cluster.Testbed) -> None:
    names, job_name, _ = await started(kube, slurm, testbed, namespace, scheduler.name, "post")
    async with call_api(kube, "DELETE", namespace=namespace, url=f"pods/{names[3]}"):
        pass
    await assert_clean(kube, slurm, testbed, namespace, names, job_name)


async def test_a_preempted_component_takes_the_whole_gang(
        kube: Client, slurm: httpx.AsyncClient, namespace: str, scheduler: RunningScheduler,
        testbed: cluster.Testbed) -> None:
    names, job_name, _ = await started(kube, slurm, testbed, namespace, scheduler.name,
                                       "preempted")
    pod = await get_pod(kube, namespace, names[2])  # a GPU worker's node: component 1
    assert pod is not None
    await preempted_on(kube, slurm, testbed, namespace, names, job_name,
                       pod["metadata"]["annotations"][f"{PREFIX}gang-node"])


async def test_kill_9_before_the_binds_resumes_the_same_heterogeneous_job(
        kube: Client, slurm: httpx.AsyncClient, namespace: str,
        testbed: cluster.Testbed) -> None:
    await quiet(slurm, testbed)
    name = "sunk-het-crash"
    job_name = f"gang:{namespace}/label:crash"
    blocker = block(testbed, testbed.nodes[3:])
    running = start_scheduler(testbed, name=name)
    try:
        names = await labelled_gang(kube, namespace, name, "crash")()
        submitted = await eventually(lambda: live_jobs(slurm, job_name), within=30)
        running.stop(signal.SIGKILL)
        testbed.slurm("scancel", blocker)

        async def running_started() -> bool:
            jobs = await live_jobs(slurm, job_name)
            return bool(jobs) and all((j.get("extra") or "").endswith(": started")
                                      for j in jobs)

        await eventually(running_started, within=60)
    finally:
        running.stop()
        testbed.slurm("scancel", blocker)
    restarted = start_scheduler(testbed, name=name, log_name=f"{name}-restarted")
    try:
        pods = await wait_all_bound(kube, namespace, names)
        parts = await assert_in_components(testbed, slurm, pods, job_name, CPU_AND_GPUS)
        assert {p["job_id"] for p in parts} == {j["job_id"] for j in submitted}
        assert len(await jobs_named(slurm, job_name)) == 2, "no second job"
    finally:
        await end_gang(kube, slurm, namespace, names, job_name)
        restarted.stop()
    await assert_clean(kube, slurm, testbed, namespace, names, job_name)


async def test_a_segment_across_shapes_is_refused_unless_the_largest_shape_is_allowed(
        kube: Client, slurm: httpx.AsyncClient, namespace: str, scheduler: RunningScheduler,
        testbed: cluster.Testbed) -> None:
    await quiet(slurm, testbed)
    refused = await labelled_gang(kube, namespace, scheduler.name, "seg",
                                  **{f"{PREFIX}segment": "2"})()

    async def told() -> bool:
        return "HeterogeneousUnsupported" in str(await events_for(kube, namespace, refused[0]))

    await eventually(told, within=30)
    assert not await jobs_named(slurm, f"gang:{namespace}/label:seg")
    allowed = await labelled_gang(kube, namespace, scheduler.name, "fallback",
                                  **{f"{PREFIX}segment": "2",
                                     f"{PREFIX}gang-shape": "exact-or-largest"})()
    job_name = f"gang:{namespace}/label:fallback"
    await wait_all_bound(kube, namespace, allowed)
    (job,) = await live_jobs(slurm, job_name)
    assert job["node_count"]["number"] == 4 and gpus_per_node(job) == GPUS
    reasons = {e["reason"] for e in await events_for(kube, namespace, allowed[0])}
    assert "GangShapeLargest" in reasons
    await end_gang(kube, slurm, namespace, allowed, job_name)


async def test_a_kubernetes_podgroup_whose_members_differ(
        kube: Client, slurm: httpx.AsyncClient, namespace: str, scheduler: RunningScheduler,
        testbed: cluster.Testbed) -> None:
    if testbed.kubernetes == "1.35":
        pytest.skip("Kubernetes 1.35 serves no PodGroups (the bed runs 1.37 unless told)")
    group = f"scheduling.k8s.io/{ {'1.36': 'v1alpha2'}.get(testbed.kubernetes, 'v1beta1') }"

    async def make() -> list[str]:
        await kube.request("POST", "podgroups", namespace=namespace, version=group, json={
            "apiVersion": group, "kind": "PodGroup",
            "metadata": {"name": "serve", "namespace": namespace},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 4}}}})
        names = [f"serve-{i}" for i in range(4)]  # name order: serve-0 (CPU) is rank 0
        for i, name in enumerate(names):
            spec = (gpu_spec if i else cpu_spec)(namespace, scheduler.name)
            await create(kube, {"apiVersion": "v1", "kind": "Pod",
                                "metadata": {"name": name, "namespace": namespace},
                                "spec": {**spec, "schedulingGroup": {"podGroupName": "serve"}}})
        return names

    job_name = f"gang:{namespace}/workload:serve"
    names, _ = await one_node_short_then_bound(kube, slurm, testbed, namespace, make, job_name,
                                               CPU_AND_GPUS)
    await end_gang(kube, slurm, namespace, names, job_name)
