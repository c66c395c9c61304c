"""Gangs from Kubernetes' own PodGroups (``scheduling.k8s.io``), on the bed's API server: a bare
PodGroup, a Job whose PodGroup the Job controller makes, and a basic policy."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from sunk.kube import Client
from testbed import cluster
from tests.e2e.conftest import RunningScheduler
from tests.e2e.helpers import create, eventually, pod_manifest, quiet
from tests.e2e.test_gangs import (
    SIZE,
    assert_none_bound_for,
    assert_ranked,
    block,
    by_completion_index,
    gang_of_four_waits_for_four_free_nodes,
    live_jobs,
    no_live_job,
    wait_all_bound,
)

GROUP = "scheduling.k8s.io"


@pytest.fixture
async def version(kube: Client, testbed: cluster.Testbed) -> str:
    """The version of the API the bed's release serves PodGroups in."""
    if testbed.kubernetes == "1.35":
        pytest.skip("Kubernetes 1.35 serves no PodGroups (the bed runs 1.37 unless told)")
    return {"1.36": "v1alpha2"}.get(testbed.kubernetes, "v1beta1")


async def podgroup(kube: Client, namespace: str, version: str, name: str) -> dict[str, Any]:
    return await kube.request("GET", f"podgroups/{name}", namespace=namespace,
                              version=f"{GROUP}/{version}")


def condition(group: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in (group.get("status") or {}).get("conditions") or ()
                 if c["type"] in ("PodGroupInitiallyScheduled", "PodGroupScheduled")), None)


async def test_a_podgroup_with_a_gang_policy_is_one_gang_and_says_where_it_is(
        kube: Client, slurm: httpx.AsyncClient, namespace: str, scheduler: RunningScheduler,
        testbed: cluster.Testbed, version: str) -> None:
    names = [f"train-{i}" for i in range(SIZE)]

    async def make() -> None:
        await kube.request("POST", "podgroups", namespace=namespace, version=f"{GROUP}/{version}",
                           json={"apiVersion": f"{GROUP}/{version}", "kind": "PodGroup",
                                 "metadata": {"name": "train", "namespace": namespace},
                                 "spec": {"schedulingPolicy": {"gang": {"minCount": SIZE}}}})
        for name in names:
            manifest = pod_manifest(name, namespace, scheduler.name, cpu="2")
            manifest["spec"]["schedulingGroup"] = {"podGroupName": "train"}
            await create(kube, manifest)

    async def unschedulable() -> None:  # while its job waits in Slurm's queue
        seen: list[dict[str, Any] | None] = [None]

        async def said() -> dict[str, Any] | None:
            found = seen[0] = condition(await podgroup(kube, namespace, version, "train"))
            return found if found and found["status"] == "False" and (
                "pending" in found["message"]) else None

        try:
            shown = await eventually(said, within=15)
        except TimeoutError:
            raise AssertionError(f"the PodGroup said {seen[0]}") from None
        assert shown["reason"] == "Unschedulable"
        assert shown["message"].startswith("gang workload:train: job ")

    await gang_of_four_waits_for_four_free_nodes(
        kube, slurm, testbed, namespace, names, f"gang:{namespace}/workload:train", make,
        while_pending=unschedulable)

    async def scheduled() -> dict[str, Any] | None:
        found = condition(await podgroup(kube, namespace, version, "train"))
        return found if found and found["status"] == "True" else None

    placed = await eventually(scheduled, within=15)
    assert placed["reason"] == "Scheduled"
    assert placed["message"].startswith(f"all {SIZE} members are bound to the nodes of Slurm job")


async def test_a_job_given_a_gang_podgroup_by_its_controller_is_one_gang_ranked_by_index(
        kube: Client, slurm: httpx.AsyncClient, namespace: str, scheduler: RunningScheduler,
        testbed: cluster.Testbed, version: str) -> None:
    template = pod_manifest("x", namespace, scheduler.name, cpu="2")["spec"]
    template["restartPolicy"] = "Never"
    spec: dict[str, Any] = {"parallelism": SIZE, "completions": SIZE,
                            "completionMode": "Indexed", "backoffLimit": 0,
                            "template": {"spec": template}}
    if version != "v1alpha2":  # 1.37: a Job asks for a gang; 1.36 gives one to this shape
        spec["scheduling"] = {"schedulingPolicy": {"gang": {}}}

    async def made_group() -> str | None:
        listed = await kube.request("GET", "podgroups", namespace=namespace,
                                    version=f"{GROUP}/{version}")
        items = listed.get("items") or []
        return items[0]["metadata"]["name"] if len(items) == 1 else None

    await quiet(slurm, testbed)
    blocker = block(testbed, testbed.nodes[3:])
    try:
        await kube.request("POST", "jobs", namespace=namespace, version="batch/v1", json={
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "namespace": namespace}, "spec": spec})
        group = await eventually(made_group, within=30)
        names = await eventually(lambda: by_completion_index(kube, namespace), within=30)
        job_name = f"gang:{namespace}/workload:{group}"
        (pending,) = await eventually(lambda: live_jobs(slurm, job_name), within=30)
        assert pending["node_count"]["number"] == SIZE
        await assert_none_bound_for(kube, namespace, names, 5)
        testbed.slurm("scancel", blocker)
        pods = await wait_all_bound(kube, namespace, names)
        await assert_ranked(testbed, slurm, pods, job_name)
    finally:
        testbed.slurm("scancel", blocker)
    await no_live_job(slurm, job_name)  # the bed's kubelet completes a Job's Pods at once


async def test_a_bare_podgroup_with_a_basic_policy_lets_each_pod_run_alone(
        kube: Client, namespace: str, scheduler: RunningScheduler, version: str) -> None:
    await kube.request("POST", "podgroups", namespace=namespace, version=f"{GROUP}/{version}",
                       json={"apiVersion": f"{GROUP}/{version}", "kind": "PodGroup",
                             "metadata": {"name": "each", "namespace": namespace},
                             "spec": {"schedulingPolicy": {"basic": {}}}})
    manifest = pod_manifest("alone-0", namespace, scheduler.name)
    manifest["spec"]["schedulingGroup"] = {"podGroupName": "each"}
    await create(kube, manifest)
    (bound,) = await wait_all_bound(kube, namespace, ["alone-0"], within=30)
    assert "sunk.coreweave.com/gang-rank" not in bound["metadata"]["annotations"]
