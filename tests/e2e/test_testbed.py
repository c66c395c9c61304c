"""Both sides of the test bed are real: kube-apiserver + kwok, and Slurm behind slurmrestd."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from sunk.kube import Client, KubeError, connect
from sunk.plans.topology import BLOCK_LABEL
from testbed import cluster, pki
from testbed.topology import BLOCK_SIZE, SLURM_NAMESPACE
from tests.e2e.conftest import RunningScheduler
from tests.e2e.helpers import call_api, close_api, eventually, kube_list, quiet


async def test_api_server_is_a_stamped_kubernetes_of_the_bed_s_release(
        kube: Client, testbed: cluster.Testbed) -> None:
    version = await kube.request("GET", "/version")
    assert version["gitVersion"] == testbed.release.version


async def test_nodes_are_ready_kwok_nodes_with_gpus(
        kube: Client, testbed: cluster.Testbed) -> None:
    nodes = await kube_list(kube, "nodes")
    assert len(nodes) == testbed.node_count
    models = set()
    for node in nodes:
        ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"]
        assert ready == "True", node["metadata"]["name"]
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
        taints = [t["key"] for t in node["spec"].get("taints") or []]
        assert "node.kubernetes.io/not-ready" not in taints, "no controller would lift it"
        models.add(node["metadata"]["labels"]["gpu.nvidia.com/model"])
    assert len(models) > 1, "placement tests need Nodes that differ"


async def test_each_slurm_node_has_a_slurmd_pod_on_its_node(
        kube: Client, testbed: cluster.Testbed) -> None:
    pods = {p["spec"]["hostname"]: p for p in await kube_list(
        kube, "pods", namespace=SLURM_NAMESPACE, label_selector="app.kubernetes.io/name=slurmd")}
    for node in testbed.nodes:
        pod = pods[node.slurm_name]
        assert pod["spec"]["nodeName"] == node.k8s_name
        assert pod["status"]["phase"] == "Running"


async def test_pod_bound_by_hand_runs_under_kwok(
        kube: Client, namespace: str, testbed: cluster.Testbed) -> None:
    await kube.request("POST", "pods", namespace=namespace, json={
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "hello", "namespace": namespace},
        "spec": {"schedulerName": "nobody-schedules-this",
                 "containers": [{"name": "main", "image": "busybox",
                                 "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
    })
    pod = await kube.request("GET", "pods/hello", namespace=namespace)
    assert pod["status"].get("phase") == "Pending"
    target = testbed.nodes[-1].k8s_name
    binding = {"apiVersion": "v1", "kind": "Binding",
               "metadata": {"name": "hello", "namespace": namespace,
                            "uid": pod["metadata"]["uid"]},
               "target": {"apiVersion": "v1", "kind": "Node", "name": target}}
    async with call_api(kube, "POST", namespace=namespace, url="pods/hello/binding", json=binding):
        pass

    async def running() -> bool:
        pod.update(await kube.request("GET", "pods/hello", namespace=namespace))
        return bool(pod["status"].get("phase") == "Running")

    await eventually(running)
    assert pod["spec"]["nodeName"] == target


async def test_job_submitted_through_slurmrestd_runs_on_a_slurm_node(
        slurm: httpx.AsyncClient, testbed: cluster.Testbed, scheduler: RunningScheduler) -> None:
    """(Every job's prolog asks the scheduler for a node lock, as in a SUNK cluster.)"""
    job = {"script": "#!/bin/sh\nsleep 300\n", "name": "smoke", "partition": "batch",
           "current_working_directory": "/tmp", "environment": ["PATH=/usr/bin:/bin"],
           "minimum_cpus": 1, "memory_per_node": {"set": True, "number": 100}}
    r = await slurm.post("/slurm/v0.0.42/job/submit", json={"job": job})
    assert r.status_code == 200, r.text
    job_id = r.json()["job_id"]
    try:
        async def running() -> dict[str, Any] | None:
            got = await slurm.get(f"/slurm/v0.0.42/job/{job_id}")
            info: dict[str, Any] = got.json()["jobs"][0]
            return info if "RUNNING" in info["job_state"] else None

        info = await eventually(running)
        assert info is not None
        assert info["nodes"] in {n.slurm_name for n in testbed.nodes}
    finally:
        await slurm.delete(f"/slurm/v0.0.42/job/{job_id}")


async def test_slurmrestd_refuses_a_wrong_or_missing_token(testbed: cluster.Testbed) -> None:
    """slurmrestd itself refuses a request without a token (401); a wrong token is passed on
    and slurmctld refuses it (slurmrestd answers 511 with an authentication error)."""
    wrong = {**testbed.slurm_headers(), "X-SLURM-USER-TOKEN": "not-a-token"}
    async with httpx.AsyncClient(base_url=testbed.slurmrestd_url, timeout=10) as client:
        missing = await client.get("/slurm/v0.0.42/jobs/")
        bad = await client.get("/slurm/v0.0.42/jobs/", headers=wrong)
        good = await client.get("/slurm/v0.0.42/jobs/", headers=testbed.slurm_headers())
    assert missing.status_code == 401
    assert bad.status_code == 511
    assert [e["error"] for e in bad.json()["errors"]] == ["Protocol authentication error"]
    assert good.status_code == 200
    assert good.json()["errors"] == []


async def test_rbac_refuses_a_service_account_without_roles(
        kube: Client, namespace: str, testbed: cluster.Testbed,
        tmp_path: Path) -> None:
    await kube.request("POST", "serviceaccounts", namespace=namespace, json={
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "nobody", "namespace": namespace}})
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
               "spec": {"expirationSeconds": 600}}
    async with call_api(kube, "POST", namespace=namespace,
                        url="serviceaccounts/nobody/token", json=request) as r:
        token = r.json()["status"]["token"]
    config = tmp_path / "kubeconfig"
    config.write_text(pki.kubeconfig(testbed.apiserver_url, testbed.pki, user="nobody",
                                     token=token))
    weak = await connect(config)
    try:
        with pytest.raises(KubeError) as refused:
            await kube_list(weak, "pods", namespace=namespace)
    finally:
        await close_api(weak)
    assert refused.value.status == 403


async def test_job_controller_makes_indexed_pods_and_the_gc_removes_them(
        kube: Client, namespace: str) -> None:
    """kube-controller-manager runs the Job controller and the garbage collector: an Indexed
    Job's Pods carry their completion index (what a gang's rank is read from), and deleting the
    Job in the background removes them. Nobody runs scheduler `nobody`: the Pods stay Pending."""
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "pair", "namespace": namespace},
           "spec": {"parallelism": 2, "completions": 2, "completionMode": "Indexed",
                    "template": {"spec": {
                        "schedulerName": "nobody", "restartPolicy": "Never",
                        "containers": [{"name": "main", "image": "busybox"}]}}}}
    await kube.request("POST", "jobs", namespace=namespace, version="batch/v1", json=job)
    selector = "batch.kubernetes.io/job-name=pair"

    async def both_pods() -> list[dict[str, Any]] | None:
        pods = await kube_list(kube, "pods", namespace=namespace, label_selector=selector)
        return pods if len(pods) == 2 else None

    pods = await eventually(both_pods)
    indexes = sorted(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]
                     for p in pods)
    assert indexes == ["0", "1"]
    assert all(p["status"].get("phase") == "Pending" and not p["spec"].get("nodeName")
               for p in pods)
    assert {p["metadata"]["ownerReferences"][0]["kind"] for p in pods} == {"Job"}

    await kube.request("DELETE", "jobs/pair", namespace=namespace, version="batch/v1",
                       json={"apiVersion": "v1", "kind": "DeleteOptions",
                             "propagationPolicy": "Background"})

    async def pods_gone() -> bool:
        return not await kube_list(kube, "pods", namespace=namespace, label_selector=selector)

    await eventually(pods_gone)


async def test_podgroup_crd_is_served(kube: Client, namespace: str) -> None:
    """scheduler-plugins' PodGroup (CRD generated by controller-gen from its Go types)."""
    group = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
             "metadata": {"name": "four", "namespace": namespace},
             "spec": {"minMember": 4, "scheduleTimeoutSeconds": 60}}
    version = "scheduling.x-k8s.io/v1alpha1"
    await kube.request("POST", "podgroups", namespace=namespace, version=version, json=group)
    try:
        got = await kube.request("GET", "podgroups/four", namespace=namespace, version=version)
        assert got["spec"] == {"minMember": 4, "scheduleTimeoutSeconds": 60}
    finally:
        await kube.request("DELETE", "podgroups/four", namespace=namespace, version=version)


LWS = "leaderworkerset.x-k8s.io/v1"


async def test_leaderworkerset_makes_one_labelled_group_of_pods(
        kube: Client, namespace: str) -> None:
    """The LeaderWorkerSet controller (leader StatefulSet, then the workers' StatefulSet) and
    its Pod webhook, reached by the API server on 127.0.0.1: a group of 4 Pods with the group
    key, worker indexes 0..3 (the leader is 0) and the group size, left Pending."""
    spec = {"schedulerName": "nobody",
            "containers": [{"name": "main", "image": "busybox"}]}
    lws = {"apiVersion": LWS, "kind": "LeaderWorkerSet",
           "metadata": {"name": "group", "namespace": namespace},
           "spec": {"replicas": 1, "leaderWorkerTemplate": {
               "size": 4, "leaderTemplate": {"spec": spec}, "workerTemplate": {"spec": spec}}}}
    created = await kube.request("POST", "leaderworkersets", namespace=namespace, version=LWS,
                                 json=lws)
    assert created["spec"]["startupPolicy"] == "LeaderCreated", "the defaulting webhook ran"
    selector = "leaderworkerset.sigs.k8s.io/name=group"
    try:
        async def four_pods() -> list[dict[str, Any]] | None:
            pods = await kube_list(kube, "pods", namespace=namespace, label_selector=selector)
            return pods if len(pods) == 4 else None

        pods = await eventually(four_pods)
        by_index = {p["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"]: p
                    for p in pods}
        assert sorted(by_index) == ["0", "1", "2", "3"]
        assert len({p["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-key"]
                    for p in pods}) == 1
        assert {p["metadata"]["annotations"]["leaderworkerset.sigs.k8s.io/size"]
                for p in pods} == {"4"}
        assert by_index["0"]["metadata"]["name"] == "group-0"
        assert {by_index[i]["metadata"]["name"] for i in "123"} == {
            "group-0-1", "group-0-2", "group-0-3"}
        assert all(not p["spec"].get("nodeName") for p in pods)
    finally:
        await kube.request("DELETE", "leaderworkersets/group", namespace=namespace,
                           version=LWS, json={"apiVersion": "v1", "kind": "DeleteOptions",
                                              "propagationPolicy": "Background"})

    async def pods_gone() -> bool:
        return not await kube_list(kube, "pods", namespace=namespace, label_selector=selector)

    await eventually(pods_gone)


async def test_slurm_places_a_four_node_job_inside_one_block(
        kube: Client, slurm: httpx.AsyncClient, testbed: cluster.Testbed,
        scheduler: RunningScheduler) -> None:
    """topology/block, from the Nodes' block label: `sbatch -N 4` gets the 4 nodes of one
    block, and the other block's when a node of the first is taken (without topology, Slurm
    would take the 3 free nodes of that block and one of the next). (The prolog of every job
    asks the scheduler for a node lock, as in a SUNK cluster.)"""
    if testbed.node_count < 2 * BLOCK_SIZE:
        pytest.skip(f"needs two blocks of {BLOCK_SIZE} nodes; this test bed has "
                    f"{testbed.node_count} nodes (SUNK_TESTBED_NODES)")
    labels = {n["metadata"]["name"]: n["metadata"]["labels"].get(BLOCK_LABEL)
              for n in await kube_list(kube, "nodes")}
    block_of = {n.slurm_name: labels[n.k8s_name] for n in testbed.nodes}
    assert block_of == {n.slurm_name: f"block-{n.index // BLOCK_SIZE}" for n in testbed.nodes}
    assert "BlockName=block-1 " in testbed.slurm("scontrol", "show", "topology")
    two_blocks = [n.slurm_name for n in testbed.nodes[:2 * BLOCK_SIZE]]
    await quiet(slurm, testbed, two_blocks)

    def sbatch(*args: str) -> str:
        return testbed.slurm("sbatch", "--parsable", "--output=/dev/null", *args,
                             "--wrap", "sleep 300").strip()

    async def running_on(job: str) -> list[str]:
        async def placed() -> list[str] | None:
            info = (await slurm.get(f"/slurm/v0.0.42/job/{job}")).json()["jobs"][0]
            if "RUNNING" not in info["job_state"]:
                return None
            return testbed.slurm("scontrol", "show", "hostnames", info["nodes"]).split()

        return await eventually(placed, within=60)

    async def cancel(*jobs: str) -> None:
        testbed.slurm("scancel", *jobs)
        await quiet(slurm, testbed, two_blocks)

    jobs: list[str] = []
    try:
        jobs.append(sbatch("-N", "4"))
        nodes = await running_on(jobs[-1])
        assert len(nodes) == 4 and len({block_of[n] for n in nodes}) == 1, nodes
        await cancel(*jobs)
        for busy, free in (("block-0", "block-1"), ("block-1", "block-0")):
            taken = next(n for n in two_blocks if block_of[n] == busy)
            jobs.append(sbatch("--exclusive", f"--nodelist={taken}"))
            await running_on(jobs[-1])
            jobs.append(sbatch("-N", "4"))
            nodes = await running_on(jobs[-1])
            assert {block_of[n] for n in nodes} == {free}, (taken, nodes)
            await cancel(*jobs[-2:])
    finally:
        if jobs:
            testbed.slurm("scancel", *jobs)
