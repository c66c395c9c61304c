"""A JobSet as one gang, on the bed's JobSet controller: a driver and its workers wait for room
together, then bind at once in the JobSet's order."""

from __future__ import annotations

from typing import Any

import httpx

from sunk.kube import Client
from testbed import cluster
from tests.e2e.conftest import RunningScheduler
from tests.e2e.helpers import call_api, eventually, pod_manifest, quiet
from tests.e2e.test_gangs import (
    assert_none_bound_for,
    assert_ranked,
    block,
    live_jobs,
    no_live_job,
    wait_all_bound,
)

VERSION = "jobset.x-k8s.io/v1alpha2"
ROLES = ("driver", "workers")


def replicated(name: str, template: dict[str, Any], *, parallelism: int) -> dict[str, Any]:
    return {"name": name, "replicas": 1, "template": {"spec": {
        "parallelism": parallelism, "completions": parallelism, "completionMode": "Indexed",
        "backoffLimit": 0, "template": {"spec": template}}}}


async def in_jobset_order(kube: Client, namespace: str, size: int) -> list[str] | None:
    """The JobSet's Pods by role (as listed), Job index and completion index, once all exist."""
    async with call_api(kube, "GET", namespace=namespace, url="pods") as r:
        pods = r.json()["items"]

    def place(pod: dict[str, Any]) -> tuple[int, int, int]:
        labels = pod["metadata"]["labels"]
        return (ROLES.index(labels["jobset.sigs.k8s.io/replicatedjob-name"]),
                int(labels["jobset.sigs.k8s.io/job-index"]),
                int(labels["batch.kubernetes.io/job-completion-index"]))

    ranked = sorted(pods, key=place)
    return [p["metadata"]["name"] for p in ranked] if len(ranked) == size else None


async def test_a_jobset_is_one_gang_ranked_in_its_order(
        kube: Client, slurm: httpx.AsyncClient, namespace: str, scheduler: RunningScheduler,
        testbed: cluster.Testbed) -> None:
    template = pod_manifest("x", namespace, scheduler.name, cpu="2")["spec"]
    template["restartPolicy"] = "Never"
    jobset = {"apiVersion": VERSION, "kind": "JobSet",
              "metadata": {"name": "train", "namespace": namespace},
              "spec": {"replicatedJobs": [replicated("driver", template, parallelism=1),
                                          replicated("workers", template, parallelism=3)]}}
    job_name = f"gang:{namespace}/jobset:train"
    await quiet(slurm, testbed)
    blocker = block(testbed, testbed.nodes[3:])
    try:
        await kube.request("POST", "jobsets", namespace=namespace, version=VERSION,
                           json=jobset)
        names = await eventually(lambda: in_jobset_order(kube, namespace, 4), within=60)
        (pending,) = await eventually(lambda: live_jobs(slurm, job_name), within=30)
        assert pending["node_count"]["number"] == 4
        await assert_none_bound_for(kube, namespace, names, 5)
        testbed.slurm("scancel", blocker)
        pods = await wait_all_bound(kube, namespace, names)
        await assert_ranked(testbed, slurm, pods, job_name)  # the driver is rank 0
    finally:
        testbed.slurm("scancel", blocker)
    await no_live_job(slurm, job_name)  # the bed's kubelet completes the Pods at once
