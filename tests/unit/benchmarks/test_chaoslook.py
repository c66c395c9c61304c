"""The checker's reading of the API server's and slurmrestd's answers into a look: requests
added up from the containers, gangs by sunk's label, the lock and drain of each Node, the GPUs
of jobs and claims."""

from __future__ import annotations

from typing import Any

from benchmarks.chaoslook import claim_looks, job_look, read, requests

GIB = 1 << 30


def pod(name: str, namespace: str = "chaos", node: str = "", **extra: Any) -> dict[str, Any]:
    spec = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1500m",
                                                                    "memory": "1Gi"}}}],
            "nodeName": node, **extra.pop("spec", {})}
    return {"metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                         **extra.pop("metadata", {})},
            "spec": spec, "status": extra.pop("status", {})}


def test_requests_add_up_containers_or_the_largest_init_container() -> None:
    two = pod("a", spec={"containers": [
        {"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
        {"resources": {"requests": {"cpu": "250m"}}}, {"name": "none"}]})
    assert requests(two) == (1250, GIB)
    init = pod("b", spec={"initContainers": [
        {"resources": {"requests": {"cpu": "4", "memory": "512Mi"}}}]})
    assert requests(init) == (4000, GIB)


def test_a_look_reads_gangs_waiting_words_nodes_locks_and_drains() -> None:
    member = pod("g-0", metadata={"labels": {"sunk.coreweave.com/gang": "g"},
                                  "annotations": {"sunk.coreweave.com/gang-size": "3"}},
                 status={"conditions": [{"type": "PodScheduled", "status": "False",
                                         "message": "waiting for 2 nodes"}]})
    done = pod("done", node="kwok-node-000", status={"phase": "Succeeded"})
    slurmd = pod("slurmd", "slurm", "kwok-node-000",
                 metadata={"annotations": {"sunk.coreweave.com/lock": "locked"}},
                 spec={"hostname": "h100-000"})
    node = {"metadata": {"name": "kwok-node-000"},
            "spec": {"unschedulable": True, "taints": [{"key": "sunk.coreweave.com/lock"}]},
            "status": {"allocatable": {"cpu": "33", "memory": "257Gi"}}}
    slurm_node = {"name": "h100-000", "state": ["IDLE", "DRAIN"], "reason": "k8s: cordoned"}
    job = {"job_id": 4, "name": "pod:chaos/x", "job_state": ["RUNNING"], "nodes": "h100-000",
           "extra": "sunk-pod=chaos/x uid=0a-1 scheduler=s"}
    sbatch = {"job_id": 5, "name": "chaos-sbatch", "job_state": ["RUNNING"]}
    look = read("chaos", [member, done, slurmd], [job, sbatch], [node], [slurm_node], [])
    (g, finished) = look.pods
    assert (g.gang, g.gang_size, g.waiting_says) == ("chaos/label:g", 3, "waiting for 2 nodes")
    assert (finished.cpu_m, finished.memory) == (0, 0), "an ended Pod holds no room"
    assert [o.cpu_m for o in look.others] == [1500]
    assert look.host_of == {"h100-000": "kwok-node-000"}
    (n,) = look.nodes
    assert (n.slurm_name, n.cpu_m, n.memory, n.cordoned, n.tainted, n.lock) == (
        "h100-000", 33000, 257 * GIB, True, True, "locked")
    assert n.slurm_states == {"IDLE", "DRAIN"} and n.slurm_reason == "k8s: cordoned"
    assert [(j.job_id, j.uid) for j in look.jobs] == [(4, "0a-1")], "only the soak's jobs"


def test_a_gangs_job_names_its_members_and_its_gpus_per_node() -> None:
    job = job_look({"job_id": 7, "job_state": ["RUNNING", "COMPLETING"],
                    "nodes": "h100-[000-001]", "het_job_id": {"number": 6, "set": True},
                    "gres_detail": ["gpu:h100:2(IDX:0-1)", "gpu:h100:1(IDX:5)"],
                    "extra": "sunk-gang=chaos/label:g uid=ab-cd scheduler=s "
                             "members=0123456789ab,ba9876543210: started"})
    assert job.members == ("0123456789ab", "ba9876543210") and job.completing
    assert job.node_list == ("h100-000", "h100-001") and job.het_job_id == 6
    assert job.gpus == {("h100-000", 0), ("h100-000", 1), ("h100-001", 5)}


def test_an_allocated_claim_gives_its_pod_node_and_gpu_indexes() -> None:
    allocated = {"metadata": {"name": "c"}, "status": {
        "allocation": {"devices": {"results": [{"device": "gpu-3"}, {"device": "gpu-12"}]},
                       "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                           {"key": "metadata.name", "values": ["kwok-node-001"]}]}]}},
        "reservedFor": [{"resource": "pods", "uid": "pod-uid"}]}}
    pending = {"metadata": {"name": "d"}, "status": {}}
    (claim,) = claim_looks([allocated, pending])
    assert (claim.pod_uid, claim.node, claim.gpus) == ("pod-uid", "kwok-node-001",
                                                      frozenset({3, 12}))
