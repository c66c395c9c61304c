"""GPUs by ResourceClaim on the real bed (its DRA driver stand-in publishes each Node's 8 GPUs):
Slurm picks the GPUs, sunk writes exactly those devices into the claim, so a Slurm job and a
Pod on one node hold disjoint GPUs."""

from __future__ import annotations

import signal
from typing import Any

import httpx

from sunk.kube import Client
from sunk.plans.claims import gres_indexes
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
from tests.e2e.test_gangs import assert_none_bound_for
from tests.e2e.test_waiting import scheduled

PREFIX = "sunk.coreweave.com/"
RESOURCE = "resource.k8s.io/v1"


def gpus_by_claim(name: str, namespace: str, scheduler: str, *, template: str,
                  node: str | None = None) -> dict[str, Any]:
    """A Pod asking for GPUs through a claim made from ``template``, on Slurm node ``node``."""
    manifest = pod_manifest(name, namespace, scheduler, annotations={
        f"{PREFIX}required-nodes": node} if node else {})
    manifest["spec"]["resourceClaims"] = [{"name": "gpus",
                                           "resourceClaimTemplateName": template}]
    manifest["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    return manifest


async def claim_template(kube: Client, namespace: str, name: str, count: int,
                         **exactly: Any) -> None:
    await kube.request("POST", "resourceclaimtemplates", namespace=namespace, version=RESOURCE,
                       json={"apiVersion": RESOURCE, "kind": "ResourceClaimTemplate",
                             "metadata": {"name": name, "namespace": namespace},
                             "spec": {"spec": {"devices": {"requests": [{
                                 "name": "gpu", "exactly": {
                                     "deviceClassName": "gpu.nvidia.com", "count": count,
                                     **exactly}}]}}}})


async def claim_of(kube: Client, namespace: str, pod: str) -> dict[str, Any] | None:
    async with call_api(kube, "GET", namespace=namespace, url="resourceclaims",
                        version=RESOURCE) as r:
        for claim in r.json()["items"]:
            owners = claim["metadata"].get("ownerReferences") or []
            if any(o.get("kind") == "Pod" and o.get("name") == pod for o in owners):
                return dict(claim)
    return None


def devices_of(claim: dict[str, Any]) -> list[int]:
    results = ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get(
        "results") or []
    return sorted(int(r["device"].removeprefix("gpu-")) for r in results)


async def job_gpus(slurm: httpx.AsyncClient, job_id: int | str) -> list[int]:
    (job,) = (await slurm.get(f"/slurm/v0.0.42/job/{job_id}")).json()["jobs"]
    return [i for detail in job.get("gres_detail") or [] for i in gres_indexes(detail)]


async def bound_with_claim(kube: Client, namespace: str, name: str, within: float = 60
                           ) -> tuple[dict[str, Any], dict[str, Any]]:
    async def ready() -> tuple[dict[str, Any], dict[str, Any]] | None:
        pod = await get_pod(kube, namespace, name)
        claim = await claim_of(kube, namespace, name)
        if pod and pod["spec"].get("nodeName") and claim and devices_of(claim):
            return pod, claim
        return None

    return await eventually(ready, within)


async def test_a_slurm_job_and_a_pod_share_a_node_on_disjoint_gpus(
        kube: Client, slurm: httpx.AsyncClient, namespace: str, scheduler: RunningScheduler,
        testbed: cluster.Testbed) -> None:
    node = testbed.nodes[1]
    await quiet(slurm, testbed)
    slurm_job = testbed.slurm("sbatch", "--parsable", f"--nodelist={node.slurm_name}",
                              "--gres=gpu:2", "--chdir=/tmp", "--output=/dev/null",
                              "--job-name=gpu-user", "--wrap=sleep 600").strip()
    try:
        async def slurm_has_gpus() -> list[int] | None:
            return await job_gpus(slurm, slurm_job) or None

        theirs = await eventually(slurm_has_gpus, within=30)
        await claim_template(kube, namespace, "two-gpus", 2)
        await create(kube, gpus_by_claim("two", namespace, scheduler.name, template="two-gpus",
                                         node=node.slurm_name))
        pod, claim = await bound_with_claim(kube, namespace, "two")
        ours = devices_of(claim)
        job_id = pod["metadata"]["annotations"][f"{PREFIX}job-id"]
        assert ours == await job_gpus(slurm, job_id), "the claim holds what Slurm gave the job"
        assert len(ours) == 2 and not set(ours) & set(theirs), (ours, theirs)
        assert pod["spec"]["nodeName"] == node.k8s_name
        allocation = claim["status"]["allocation"]
        assert allocation["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0][
            "values"] == [node.k8s_name]
        assert {r["pool"] for r in allocation["devices"]["results"]} == {node.k8s_name}
        assert claim["status"]["reservedFor"] == [
            {"resource": "pods", "name": "two", "uid": pod["metadata"]["uid"]}]
        # 2 + 2 taken of 8: a Pod asking for 6 more waits
        await claim_template(kube, namespace, "six-gpus", 6)
        await create(kube, gpus_by_claim("six", namespace, scheduler.name, template="six-gpus",
                                         node=node.slurm_name))
        await assert_none_bound_for(kube, namespace, ["six"], 8)
        claim6 = await claim_of(kube, namespace, "six")
        assert claim6 is not None and not devices_of(claim6)
        # the Pod deleted: its job ends and its claim goes; the waiting one gets the GPUs
        async with call_api(kube, "DELETE", namespace=namespace, url="pods/two"):
            pass

        async def released() -> bool:
            return await claim_of(kube, namespace, "two") is None and (
                await get_pod(kube, namespace, "two") is None)

        await eventually(released, within=60)
        _, claim6 = await bound_with_claim(kube, namespace, "six", within=90)
        assert len(devices_of(claim6)) == 6 and not set(devices_of(claim6)) & set(theirs)
    finally:
        testbed.slurm("scancel", slurm_job)


async def test_scancel_deletes_the_pod_and_its_claim_goes_with_it(
        kube: Client, slurm: httpx.AsyncClient, namespace: str, scheduler: RunningScheduler,
        testbed: cluster.Testbed) -> None:
    await quiet(slurm, testbed)
    await claim_template(kube, namespace, "one-gpu", 1)
    await create(kube, gpus_by_claim("one", namespace, scheduler.name, template="one-gpu"))
    pod, _ = await bound_with_claim(kube, namespace, "one")
    testbed.slurm("scancel", pod["metadata"]["annotations"][f"{PREFIX}job-id"])

    async def gone() -> bool:
        return await get_pod(kube, namespace, "one") is None and (
            await claim_of(kube, namespace, "one") is None)

    await eventually(gone, within=60)
    await quiet(slurm, testbed)


async def test_a_claim_slurm_cannot_be_told_is_refused_with_no_job(
        kube: Client, slurm: httpx.AsyncClient, namespace: str, scheduler: RunningScheduler,
        testbed: cluster.Testbed) -> None:
    await claim_template(kube, namespace, "by-memory", 1, selectors=[{"cel": {
        "expression": 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) '
                      '>= 0'}}])
    await create(kube, gpus_by_claim("odd", namespace, scheduler.name, template="by-memory"))

    seen: list[Any] = [None, None]

    async def told() -> dict[str, Any] | None:
        pod = await get_pod(kube, namespace, "odd")
        condition = seen[0] = scheduled(pod)
        reasons = seen[1] = {e["reason"] for e in await events_for(kube, namespace, "odd")}
        # (it waits, saying so, until the resource-claim controller has made its claim)
        said = condition and "cannot be told to Slurm" in condition["message"]
        return condition if said and "UnmappableClaim" in reasons else None

    try:
        condition = await eventually(told, within=30)
    except TimeoutError:
        raise AssertionError(f"condition {seen[0]}, Events {seen[1]}") from None
    assert condition["status"] == "False" and condition["reason"] == "Unschedulable"
    pod = await get_pod(kube, namespace, "odd")
    assert pod is not None and not pod["spec"].get("nodeName")
    assert f"{PREFIX}job-id" not in pod["metadata"].get("annotations", {})
    listed = (await slurm.get("/slurm/v0.0.42/jobs/")).json()["jobs"]
    assert not [j for j in listed if j["name"] == f"pod:{namespace}/odd"]


async def test_kill_9_between_the_start_and_the_allocation_allocates_once_as_slurm_gave(
        kube: Client, slurm: httpx.AsyncClient, namespace: str,
        testbed: cluster.Testbed) -> None:
    await quiet(slurm, testbed)
    name = "sunk-dra-crash"
    node = testbed.nodes[2]
    blocker = testbed.slurm("sbatch", "--parsable", f"--nodelist={node.slurm_name}",
                            "--exclusive", "--chdir=/tmp", "--output=/dev/null",
                            "--wrap=sleep 600").strip()
    running = start_scheduler(testbed, name=name)
    try:
        await claim_template(kube, namespace, "three-gpus", 3)
        await create(kube, gpus_by_claim("crash", namespace, name, template="three-gpus",
                                         node=node.slurm_name))

        async def submitted() -> str | None:
            pod = await get_pod(kube, namespace, "crash")
            annotations: dict[str, str] = (pod or {}).get("metadata", {}).get("annotations", {})
            return annotations.get(f"{PREFIX}job-id")

        job_id = await eventually(submitted, within=30)
        running.stop(signal.SIGKILL)
        testbed.slurm("scancel", blocker)

        async def started() -> bool:
            (job,) = (await slurm.get(f"/slurm/v0.0.42/job/{job_id}")).json()["jobs"]
            return (job.get("extra") or "").endswith(": started")

        await eventually(started, within=60)
        claim = await claim_of(kube, namespace, "crash")
        assert claim is not None and not devices_of(claim), "not allocated while sunk was down"
    finally:
        running.stop()
        testbed.slurm("scancel", blocker)
    restarted = start_scheduler(testbed, name=name, log_name=f"{name}-restarted")
    try:
        pod, claim = await bound_with_claim(kube, namespace, "crash")
        assert devices_of(claim) == await job_gpus(slurm, job_id)
        assert len(devices_of(claim)) == 3
        assert pod["metadata"]["annotations"][f"{PREFIX}job-id"] == job_id
    finally:
        async with call_api(kube, "DELETE", namespace=namespace, url="pods/crash",
                            params={"gracePeriodSeconds": "0"}, raise_for_status=False):
            pass

        async def ended() -> bool:
            (job,) = (await slurm.get(f"/slurm/v0.0.42/job/{job_id}")).json()["jobs"]
            return job["job_state"][0] not in ("PENDING", "RUNNING", "CONFIGURING")

        await eventually(ended, within=60)
        restarted.stop()


async def test_each_gang_member_gets_its_own_nodes_gpus(
        kube: Client, slurm: httpx.AsyncClient, namespace: str, scheduler: RunningScheduler,
        testbed: cluster.Testbed) -> None:
    await quiet(slurm, testbed)
    await claim_template(kube, namespace, "two-gpus", 2)
    names = ["g0", "g1", "g2"]
    for rank, name in enumerate(names):
        manifest = gpus_by_claim(name, namespace, scheduler.name, template="two-gpus")
        manifest["metadata"]["labels"] = {f"{PREFIX}gang": "claimed"}
        manifest["metadata"]["annotations"].update({f"{PREFIX}gang-size": "3",
                                                    f"{PREFIX}gang-index": str(rank)})
        await create(kube, manifest)
    bound = [await bound_with_claim(kube, namespace, name, within=90) for name in names]
    job_id = bound[0][0]["metadata"]["annotations"][f"{PREFIX}job-id"]
    (job,) = (await slurm.get(f"/slurm/v0.0.42/job/{job_id}")).json()["jobs"]
    by_node = dict(zip([a["name"] for a in job["job_resources"]["nodes"]["allocation"]],
                       job["gres_detail"], strict=True))
    k8s = {n.k8s_name: n.slurm_name for n in testbed.nodes}
    for pod, claim in bound:
        node = pod["spec"]["nodeName"]
        assert pod["metadata"]["annotations"][f"{PREFIX}gang-node"] == k8s[node]
        assert devices_of(claim) == gres_indexes(by_node[k8s[node]]), pod["metadata"]["name"]
        pools = {r["pool"] for r in claim["status"]["allocation"]["devices"]["results"]}
        assert pools == {node}, "the member's own node's devices"
    for name in names:
        async with call_api(kube, "DELETE", namespace=namespace, url=f"pods/{name}",
                            params={"gracePeriodSeconds": "0"}):
            pass
    await quiet(slurm, testbed)
